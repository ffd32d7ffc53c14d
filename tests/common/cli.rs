//! Running the `gavel` binary as a child process: a temp dir with a config and a store, the
//! command with no leaking environment, and its exit code and output.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use super::{MockJudge, MOCK_KEY};

pub const BIN: &str = env!("CARGO_BIN_EXE_gavel");
/// Variables (and clap env twins) that would change what the child does if they leaked in.
const LEAKY_ENV: &str = "GAVEL_CONFIG GAVEL_STORE GAVEL_STORE_URL GAVEL_LOG_JSON \
    GAVEL_DIFF_RUBRICS GAVEL_DIFF_JUDGES GAVEL_DIFF_FORMAT GAVEL_DIFF_HTML GAVEL_DIFF_OUTPUT GAVEL_DIFF_CONCURRENCY \
    GAVEL_EVAL_JUDGES GAVEL_EVAL_RUBRICS GAVEL_EVAL_ORDERS GAVEL_EVAL_PERMUTATIONS \
    GAVEL_EVAL_CONCURRENCY GAVEL_EVAL_LIMIT GAVEL_EVAL_FORMAT GAVEL_EVAL_OUTPUT GAVEL_EVAL_ATTACKS \
    GAVEL_EVAL_ATTACKS_DIR GAVEL_EVAL_CONFIRM_ABOVE GAVEL_EVAL_YES OPENAI_API_KEY \
    OPENAI_BASE_URL GAVEL_JUDGE_MODEL RUST_LOG GAVEL_RUBRIC GAVEL_JUDGE GAVEL_RENDER_FORMAT \
    GAVEL_JUDGE_MODE GAVEL_PERMUTATIONS GAVEL_SCORE_OUTPUT GAVEL_RENDER_OUTPUT \
    GAVEL_CACHE_CLEAR_YES";

/// A `[judges.NAME]` table pointing at `mock` (key in `GAVEL_TEST_MOCK_KEY`).
pub fn judge_toml(name: &str, mock: &MockJudge, max_retries: u32) -> String {
    format!(
        "[judges.{name}]\nbackend = \"openai\"\nbase_url = \"{}\"\nmodel = \"{name}-model\"\n\
         api_key_env = \"GAVEL_TEST_MOCK_KEY\"\nmax_retries = {max_retries}\n\
         max_backoff_s = 0.05\ntimeout_s = 5\n\n",
        mock.base_url()
    )
}

/// A temp dir with a config, a store path and the test's files.
pub struct CliSetup {
    pub dir: tempfile::TempDir,
    pub cfg: PathBuf,
    pub store: PathBuf,
}

impl CliSetup {
    pub fn new(config: &str) -> CliSetup {
        let dir = tempfile::tempdir().unwrap();
        let (cfg, store) = (dir.path().join("gavel.toml"), dir.path().join("store"));
        std::fs::write(&cfg, config).unwrap();
        CliSetup { dir, cfg, store }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    /// `gavel SUBCOMMAND ARGS... --config CFG --store STORE`.
    pub fn command(&self, subcommand: &str, args: &[&str]) -> Command {
        let mut c = self.config_command(subcommand, args);
        c.args([OsStr::new("--store"), self.store.as_os_str()]);
        c
    }

    /// `gavel SUBCOMMAND ARGS... --config CFG`, for a command that keeps no store (`render`,
    /// `lint`).
    pub fn config_command(&self, subcommand: &str, args: &[&str]) -> Command {
        let mut c = self.plain_command(subcommand, args);
        c.args([OsStr::new("--config"), self.cfg.as_os_str()]);
        c
    }

    /// `gavel SUBCOMMAND ARGS...` in the temp dir, with no leaking environment (for commands
    /// that name their files themselves, such as `train judge`).
    pub fn plain_command(&self, subcommand: &str, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        for k in LEAKY_ENV.split_whitespace() {
            c.env_remove(k);
        }
        c.current_dir(self.dir.path())
            .env("GAVEL_TEST_MOCK_KEY", MOCK_KEY);
        c.stdin(Stdio::null()).kill_on_drop(true);
        c.arg(subcommand).args(args);
        c
    }
}

pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\nstderr: {}", self.stdout, self.stderr))
    }
}

/// Runs the command to its end, within 60 s.
pub async fn run(c: Command) -> Out {
    run_within(c, Duration::from_secs(60)).await
}

pub async fn run_within(mut c: Command, limit: Duration) -> Out {
    let out = tokio::time::timeout(limit, c.output())
        .await
        .unwrap_or_else(|_| panic!("ran over {limit:?}"))
        .unwrap();
    Out {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

//! Secrets stay out of logs and error bodies: a real `gavel serve` with debug JSON logs.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use crate::access::{KEY_A, KEY_B};
use crate::common::{marked_group, Behaviour, MockJudge, MOCK_KEY};

const BIN: &str = env!("CARGO_BIN_EXE_gavel");

#[tokio::test(flavor = "multi_thread")]
async fn keys_never_reach_logs_or_errors_and_json_logs_carry_request_ids() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gavel.toml");
    let toml = format!(
        "default_judge = \"mock\"\n[judges.mock]\nbackend = \"openai\"\nbase_url = \"{}\"\n\
         model = \"mock-judge-1\"\napi_key_env = \"GAVEL_OPS_JUDGE_KEY\"\nmax_retries = 1\n\
         max_backoff_s = 0.05\n",
        mock.base_url()
    );
    std::fs::write(&cfg, toml).unwrap();
    let mut cmd = tokio::process::Command::new(BIN);
    for k in [
        "GAVEL_CONFIG",
        "GAVEL_STORE",
        "GAVEL_ADDR",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ] {
        cmd.env_remove(k);
    }
    cmd.args(["serve", "--log-json", "--addr", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--store")
        .arg(dir.path().join("store"))
        .env("RUST_LOG", "debug")
        .env("GAVEL_API_KEYS", format!("{KEY_A},{KEY_B}"))
        .env("GAVEL_OPS_JUDGE_KEY", MOCK_KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let logs = tokio::spawn(async move {
        let mut buf = String::new();
        let _ = stderr.read_to_string(&mut buf).await;
        buf
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(u) = l.strip_prefix("gavel listening on ") {
                return u.to_string();
            }
        }
        panic!("gavel serve exited before listening")
    })
    .await
    .expect("not listening in 30 s");

    let client = reqwest::Client::new();
    let mut bodies = String::new();
    let mut send = async |req: reqwest::RequestBuilder, status: u16| -> Value {
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), status);
        let text = resp.text().await.unwrap();
        bodies.push_str(&text);
        serde_json::from_str(&text).unwrap_or(Value::Null)
    };
    let score = format!("{url}/v1/score_group");
    send(client.post(&score).json(&marked_group(&[0.5, 0.6])), 401).await;
    let wrong = "gk-ops-test-key-wrong-3333";
    send(
        client
            .post(&score)
            .bearer_auth(wrong)
            .json(&marked_group(&[0.5, 0.6])),
        401,
    )
    .await;
    let ok = client
        .post(&score)
        .bearer_auth(KEY_A)
        .header("x-request-id", "ops-req-scored")
        .json(&marked_group(&[0.5, 0.6]));
    send(ok, 200).await;
    // The judge refuses its key and quotes it back; gavel must not pass it on.
    mock.push(Behaviour::EchoAuth);
    let refused = client
        .post(&score)
        .bearer_auth(KEY_B)
        .header("x-request-id", "ops-req-refused")
        .json(&marked_group(&[0.1, 0.2]));
    let body = send(refused, 502).await;
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("Incorrect API key provided: Bearer [redacted]"),
        "{message}"
    );
    send(client.get(format!("{url}/readyz")), 200).await;

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("stopped within 10 s")
        .unwrap();
    assert!(status.success(), "{status}");
    let logs = logs.await.unwrap();

    assert!(logs.lines().count() > 10, "debug logging is on: {logs}");
    for secret in [KEY_A, KEY_B, wrong, MOCK_KEY] {
        assert!(!logs.contains(secret), "{secret} is in the logs:\n{logs}");
        assert!(
            !bodies.contains(secret),
            "{secret} is in a response body:\n{bodies}"
        );
    }
    let records: Vec<Value> = logs
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}"))
        })
        .collect();
    let in_request = |id: &str| {
        records
            .iter()
            .filter(|r| r["span"]["request_id"] == id)
            .collect::<Vec<_>>()
    };
    assert!(
        !in_request("ops-req-scored").is_empty(),
        "no log line carries the request id:\n{logs}"
    );
    let refused_lines = in_request("ops-req-refused");
    assert!(
        refused_lines
            .iter()
            .any(|r| r["level"] == "WARN" || r["level"] == "ERROR"),
        "the judge failure is logged with its request id:\n{logs}"
    );
    // At debug level the judge's raw reply is logged whole (with the key scrubbed, above).
    let scored = in_request("ops-req-scored");
    let reply = scored
        .iter()
        .find(|r| r["fields"]["message"] == "judge reply")
        .unwrap_or_else(|| panic!("no raw reply logged:\n{logs}"));
    let raw: Value = serde_json::from_str(reply["fields"]["reply"].as_str().unwrap()).unwrap();
    assert!(
        raw["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("mock read"),
        "{reply}"
    );
    assert!(scored
        .iter()
        .any(|r| r["fields"]["message"] == "judge request"));
}

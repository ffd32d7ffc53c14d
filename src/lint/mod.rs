//! `gavel lint`: checks rubrics and judge templates before anyone trains on them.
//!
//! Every rubric file must parse; its checklist, verifiers and policy must make sense as a
//! scoring request would use them (an `answer_line` that leaves `expected` to the request is
//! compiled with a placeholder of its kind); and every template pair must render, through the
//! real [`Prompts::render`](crate::domain::prompt::Prompts::render) under strict undefined, against a built-in sample group with each
//! rubric (plus a plain and a checklist sample), showing the rubric text, the checklist items
//! and the trajectories. Each finding is one `FILE:LINE: message` line (`FILE: message` where
//! no line applies); warnings read `FILE:LINE: warning: message` and do not fail the run.
//!
//! `rubrics` checks the rubric files, `templates` renders the judge templates; both add to the
//! one `Report` kept here, which prints the findings and the summary.

mod rubrics;
mod templates;

use std::path::PathBuf;

use crate::cli::CliError;
use crate::domain::prompt::PromptError;
use crate::toolkit::exit::Exit;

use rubrics::lint_rubrics;
use templates::lint_templates;

/// What `gavel lint` checks.
#[derive(Debug, Clone, Default)]
pub struct LintOptions {
    /// Rubric files (*.toml) or directories of them (none: `rubrics`).
    pub paths: Vec<PathBuf>,
    /// A directory of judge templates to check too.
    pub prompts: Option<PathBuf>,
}

impl LintOptions {
    /// Fills what the command line left open from the config: the daemon lints what it will
    /// load.
    pub fn with_config_dirs(mut self, cfg: &crate::config::Config) -> LintOptions {
        if self.paths.is_empty() {
            self.paths.extend(cfg.rubrics_dir.clone());
        }
        if self.prompts.is_none() {
            self.prompts = cfg.prompts_dir.clone();
        }
        self
    }
}

/// Prints one `file:line: problem` line per finding to stderr and a summary to stdout: Failed
/// when a problem was found (warnings alone do not fail).
pub fn run(opts: &LintOptions) -> Result<Exit, CliError> {
    let mut report = Report::default();
    let default = [PathBuf::from("rubrics")];
    let paths = if opts.paths.is_empty() {
        &default[..]
    } else {
        &opts.paths
    };
    let rubrics = lint_rubrics(paths, &mut report);
    lint_templates(opts.prompts.as_deref(), &rubrics, &mut report);
    for (_, line) in &report.findings {
        eprintln!("{line}");
    }
    println!("{}", report.summary());
    Ok(Exit::failed_if(report.problems() > 0))
}

#[derive(Debug, Default)]
struct Report {
    /// (is a warning, the line as printed), in the order found.
    findings: Vec<(bool, String)>,
    rubrics: usize,
    templates: usize,
}

impl Report {
    /// Adds `FILE[:LINE]: [warning: ]MESSAGE` unless it is already there (templates render many
    /// times).
    fn add(&mut self, file: &str, line: Option<usize>, warning: bool, message: impl AsRef<str>) {
        let line = line.map(|l| format!(":{l}")).unwrap_or_default();
        let level = if warning { "warning: " } else { "" };
        let f = (
            warning,
            format!("{file}{line}: {level}{}", message.as_ref()),
        );
        if !self.findings.contains(&f) {
            self.findings.push(f);
        }
    }

    /// Adds a template error at the file and line the renderer names (`prompts/NAME:LINE`),
    /// as `shown` to the user, with a hint of what the template may use (`vars`) when a
    /// variable is undefined.
    fn template_error(&mut self, e: &PromptError, shown: &dyn Fn(&str) -> String, vars: &str) {
        let PromptError::Template { file, message } = e else {
            return self.add("prompts", None, false, e.to_string());
        };
        let name = file.strip_prefix("prompts/").unwrap_or(file);
        let (name, line) = match name.rsplit_once(':').map(|(n, l)| (n, l.parse().ok())) {
            Some((n, Some(l))) => (n, Some(l)),
            _ => (name, None),
        };
        // The renderer names the variable in a parenthesis after what failed ("tried to use +
        // operator on ... (`scale` is undefined)"); the finding leads with it, as a plain
        // `{{ scale }}` does.
        const UNDEFINED: &str = "` is undefined";
        let named = message.find(UNDEFINED).and_then(|end| {
            let start = message[..end].rfind('`')?;
            Some(&message[start..end + UNDEFINED.len()])
        });
        let message = match named {
            None => message.clone(),
            Some(u) if u == message => format!("{u} (a template can use {vars})"),
            Some(u) => {
                let rest = message.replace(&format!(" ({u})"), "");
                format!("{u}: {rest} (a template can use {vars})")
            }
        };
        let file = if name == "prompts" {
            name.into()
        } else {
            shown(name)
        };
        self.add(&file, line, false, message);
    }

    fn problems(&self) -> usize {
        self.findings.iter().filter(|f| !f.0).count()
    }

    fn summary(&self) -> String {
        let n = |k: usize, what: &str| format!("{k} {what}{}", if k == 1 { "" } else { "s" });
        let (problems, warnings) = (self.problems(), self.findings.len() - self.problems());
        let (rubrics, templates) = (n(self.rubrics, "rubric"), n(self.templates, "template"));
        let (p, w) = (n(problems, "problem"), n(warnings, "warning"));
        format!("lint: {rubrics}, {templates} checked; {p}, {w}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_hints_and_summary() {
        let mut r = Report {
            rubrics: 1,
            templates: 3,
            ..Report::default()
        };
        r.add("a.toml", Some(2), false, "bad");
        r.add("a.toml", Some(2), false, "bad");
        r.add("a.toml", None, true, "meh");
        let e = PromptError::Template {
            file: "prompts/x.user.jinja:3".into(),
            message: "`foo` is undefined".into(),
        };
        r.template_error(&e, &|n| format!("mine/{n}"), "a, b");
        let e = PromptError::Template {
            file: "prompts/x.system.jinja:2".into(),
            message: "tried to use + operator on unsupported types undefined and number \
                      (`scale` is undefined)"
                .into(),
        };
        r.template_error(&e, &|n| format!("mine/{n}"), "a, b");
        let lines: Vec<&str> = r.findings.iter().map(|f| f.1.as_str()).collect();
        assert_eq!(
            lines,
            [
                "a.toml:2: bad",
                "a.toml: warning: meh",
                "mine/x.user.jinja:3: `foo` is undefined (a template can use a, b)",
                "mine/x.system.jinja:2: `scale` is undefined: tried to use + operator on \
                 unsupported types undefined and number (a template can use a, b)",
            ]
        );
        assert_eq!(
            r.summary(),
            "lint: 1 rubric, 3 templates checked; 3 problems, 1 warning"
        );
    }
}

//! The one progress bar every long command draws on stderr (rescore's groups, eval's judgings,
//! a training run's steps, a judge's feature passes): position of total in the command's unit,
//! the rate at a precision that fits it, elapsed time, time left, and the command's message.

use std::fmt::Write;
use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressState, ProgressStyle};

/// Whether stderr is a terminal: where a bar draws (a job's log gets log lines instead).
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// A bar over `total` `unit`s (`groups`, `steps`), at `done` already (a resumed run starts part
/// way); hidden, so that every call on it costs nothing, unless `show`.
pub fn progress_bar(total: u64, done: u64, unit: &str, show: bool) -> ProgressBar {
    if !show {
        let bar = ProgressBar::hidden();
        bar.set_length(total);
        bar.set_position(done);
        return bar;
    }
    let bar = ProgressBar::new(total);
    let template = format!(
        "{{bar:30}} {{pos}}/{{len}} {unit} · {{rate}} · {{elapsed_precise}} · ETA {{eta}} {{msg}}"
    );
    let style = ProgressStyle::with_template(&template)
        .expect("a valid template")
        .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = w.write_str(&rate(s.per_sec()));
        });
    bar.set_style(style);
    bar.set_position(done);
    bar
}

/// A rate with as many digits as it needs: `1016/s`, `12.5/s`, `2.35/s`, or below one a second
/// the time each takes (`8.0 s each`): never `1,016.5017/s`.
pub fn rate(per_sec: f64) -> String {
    let mut s = String::new();
    let _ = match per_sec {
        r if !r.is_finite() || r <= 0.0 => write!(s, "—/s"),
        r if r >= 100.0 => write!(s, "{r:.0}/s"),
        r if r >= 10.0 => write!(s, "{r:.1}/s"),
        r if r >= 1.0 => write!(s, "{r:.2}/s"),
        r => write!(s, "{:.1} s each", 1.0 / r),
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_have_a_sensible_precision() {
        assert_eq!(rate(1016.5017), "1017/s");
        assert_eq!(rate(12.345), "12.3/s");
        assert_eq!(rate(2.345), "2.35/s");
        assert_eq!(rate(0.125), "8.0 s each");
        assert_eq!(rate(0.0), "—/s");
        assert_eq!(rate(f64::INFINITY), "—/s");
    }

    #[test]
    fn a_hidden_bar_keeps_its_position() {
        let bar = progress_bar(10, 3, "steps", false);
        bar.inc(2);
        assert_eq!(bar.position(), 5);
        let shown = progress_bar(10, 3, "steps", true);
        assert_eq!((shown.position(), shown.length()), (3, Some(10)));
    }
}

//! Durations in configuration files: every `*_s` key of every section is checked here, so that
//! no section needs the composer (`crate::config`) and none can name a duration that panics.

/// The longest duration any `*_s` key may name: 30 days. Past about 5.8e11 years a duration
/// no longer fits `std::time::Duration` (`from_secs_f64` panics), and nothing gavel waits for
/// takes a month, so a larger value is a typo, and `inf` would panic on every request.
pub const MAX_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

/// Whether `value` is a usable number of seconds: finite, at most [`MAX_SECONDS`], and > 0
/// (`positive`) or >= 0. The error completes "KEY ...".
pub fn check_seconds(value: f64, positive: bool) -> Result<(), String> {
    let low_ok = if positive { value > 0.0 } else { value >= 0.0 };
    if value.is_finite() && low_ok && value <= MAX_SECONDS {
        return Ok(());
    }
    let low = if positive { "> 0" } else { ">= 0" };
    Err(format!(
        "must be a number of seconds {low} and at most {MAX_SECONDS} (30 days), got {value}"
    ))
}

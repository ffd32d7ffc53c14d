//! How close `gavel rescore` runs to a judge's request-rate limit without ever tripping it.
//!
//! The mock judge enforces 1,200 requests a minute the way hosted APIs do (a request sooner than
//! the interval after the last one gets 429); gavel's judge is configured with the same
//! `requests_per_minute`. 240 distinct groups are re-scored at concurrency 16. Reported: the
//! achieved rate as a fraction of the limit (target ≥ 95 %) and the 429s the judge answered
//! (target 0).
//!
//!     cargo bench --bench rescore_rate

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use gavel::cli::ConfigSource;
use gavel::rescore::{ProgressMode, RescoreOptions};
use serde_json::json;

const RPM: u32 = 1200;
const GROUPS: usize = 240;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mock = common::MockJudge::start().await;
    mock.enforce_rate(RPM);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gavel.toml");
    std::fs::write(
        &cfg,
        format!(
            "default_judge = \"mock\"\n[judges.mock]\nbackend = \"openai\"\nbase_url = \"{}\"\nmodel = \"m\"\n\
             api_key_env = \"GAVEL_BENCH_MOCK_KEY\"\nrequests_per_minute = {RPM}\nmax_backoff_s = 1\n",
            mock.base_url()
        ),
    )
    .unwrap();
    std::env::set_var("GAVEL_BENCH_MOCK_KEY", common::MOCK_KEY);
    let input = dir.path().join("in.jsonl");
    let lines: String = (0..GROUPS)
        .map(|i| {
            let g = json!({
                "group_id": format!("g{i}"),
                "trajectories": [
                    common::simple_traj(&format!("group {i}: SCORE={} ANSWER: 4120", (i % 10) as f64 / 10.0)),
                    common::simple_traj(&format!("group {i}: SCORE=0.5 ANSWER: 4100")),
                ],
            });
            format!("{g}\n")
        })
        .collect();
    std::fs::write(&input, lines).unwrap();
    let common = ConfigSource {
        config: Some(cfg),
        store: Some(dir.path().join("store")),
        ..Default::default()
    };
    let args = RescoreOptions {
        input: Some(input),
        from_log: None,
        log_rubric: None,
        log_since: None,
        log_until: None,
        log_limit: None,
        output: dir.path().join("out.jsonl"),
        rubric: None,
        judge: None,
        concurrency: 16,
        shard: None,
        rejects: None,
        retry_rejects: false,
        progress: ProgressMode::None,
    };
    let started = Instant::now();
    let exit = gavel::rescore::run(&common, &args).await.unwrap();
    let wall = started.elapsed().as_secs_f64();
    let arrivals = mock.arrivals();
    let span = (*arrivals.last().unwrap() - arrivals[0]).as_secs_f64();
    // Rate over the run: intervals between the first and last call.
    let achieved = (arrivals.len() - 1) as f64 / span * 60.0;
    println!("rescore_rate: {GROUPS} groups, limit {RPM}/min, ended {exit:?}");
    println!("  judge calls          {}", arrivals.len());
    println!("  answered 429         {}", mock.rate_limited());
    println!(
        "  achieved rate        {achieved:.0}/min = {:.1}% of the limit",
        100.0 * achieved / f64::from(RPM)
    );
    println!("  wall time            {wall:.2} s");
}

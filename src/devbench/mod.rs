//! `gavel bench-device`: the local judge and the trainer timed on the devices of this machine,
//! on models of the real Qwen2.5 shapes with random weights written here
//! ([`crate::model::random`]; weights do not change speed, and no real model has to travel to
//! a lent GPU). `benches/gpu.sh` runs it on a GPU machine; CI runs it on tiny shapes on the CPU,
//! so it cannot rot between GPU draws.
//!
//! For each shape and device: prefill and decode tokens/s of the bare model, and the time of a
//! 4- and an 8-trajectory group in each judging mode with the prefix cache on and off. Then one
//! GRPO+LoRA step on the first shape (tokens/s, counted FLOPs, MFU against a given peak, peak
//! memory of the process) and the last-position logits of one prompt compared across the first
//! device and the CPU. One JSON report and one markdown table.
//!
//! The models use gavel's tiny byte-level tokenizer, which splits text into about three times
//! as many tokens as Qwen's: read group times with their token counts.

mod judge;
pub mod load;
mod train;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Value};

use crate::model::random::{self, FolderOptions, Init, Shape};
use crate::model::Arch;

/// What stops the benchmark; each message names the step.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("writing the model: {0}")]
    Model(String),
    #[error("local judge: {0}")]
    Judge(String),
    #[error("training step: {0}")]
    Train(String),
    #[error("{0}")]
    Io(String),
}

/// A model shape by name: `tiny` (CI), `0.5b`, `1.5b` (Qwen2.5's).
pub fn shape_by_name(name: &str) -> Option<Shape> {
    match name {
        "tiny" => Some(Shape::TINY),
        "0.5b" => Some(Shape::QWEN2_5_0_5B),
        "1.5b" => Some(Shape::QWEN2_5_1_5B),
        _ => None,
    }
}

/// The benchmark's settings.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Shapes by name ([`shape_by_name`]); the first is also trained and compared across devices.
    pub shapes: Vec<String>,
    /// Devices (`cpu`, `cuda:0`); the first is also the training device.
    pub devices: Vec<String>,
    /// Where the models, `device-bench.json` and `device-bench.md` go.
    pub out: PathBuf,
    /// Decode steps timed on the bare model.
    pub decode_steps: usize,
    /// The first device's peak dense f32 TFLOP/s, for MFU (the trainer runs in f32).
    pub peak_tflops: Option<f64>,
    /// Time whole groups on these devices only (a 16-core CPU takes minutes per 1.5B group).
    pub group_devices: Option<Vec<String>>,
}

/// Runs every measurement and writes the JSON report and the markdown table; returns the report.
pub fn run(o: &BenchOptions) -> Result<Value, BenchError> {
    let io = |p: &Path, e: std::io::Error| BenchError::Io(format!("{}: {e}", p.display()));
    std::fs::create_dir_all(&o.out).map_err(|e| io(&o.out, e))?;
    let rt = tokio::runtime::Runtime::new().map_err(|e| BenchError::Io(e.to_string()))?;
    let mut shapes = Vec::new();
    let mut first_model = None;
    for name in &o.shapes {
        let shape = shape_by_name(name).ok_or_else(|| {
            BenchError::Model(format!("unknown shape {name:?}: tiny, 0.5b or 1.5b"))
        })?;
        let dir = o.out.join(format!("model-{name}"));
        let t = Instant::now();
        write_model(&dir, shape)?;
        let write_s = t.elapsed().as_secs_f64();
        let mut per_device = Vec::new();
        for device in &o.devices {
            eprintln!("bench-device: {name} on {device}");
            let groups = o.group_devices.as_ref().is_none_or(|g| g.contains(device));
            let mut f = judge::figures(&dir, device, o.decode_steps, groups, &rt)?;
            f["device"] = json!(device);
            per_device.push(f);
        }
        shapes.push(json!({
            "shape": name,
            "parameters": shape.parameters(Arch::Qwen2, true),
            "write_s": write_s,
            "devices": per_device,
        }));
        first_model.get_or_insert((dir, shape));
    }
    let (model, shape) = first_model.ok_or_else(|| BenchError::Model("no shape given".into()))?;
    let device = o.devices.first().map_or("cpu", String::as_str);
    eprintln!("bench-device: a training step on {device}");
    let train = train::figures(&model, &shape, device, &o.out.join("train"), o.peak_tflops)?;
    let logits = judge::logits_check(&model, [device, "cpu"])?;
    let report = json!({
        "gavel": env!("CARGO_PKG_VERSION"),
        "threads": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "shapes": shapes,
        "train": train,
        "train_shape": o.shapes[0],
        "logits_check": logits,
    });
    let json_path = o.out.join("device-bench.json");
    let text = serde_json::to_string_pretty(&report).expect("json");
    std::fs::write(&json_path, text).map_err(|e| io(&json_path, e))?;
    let md_path = o.out.join("device-bench.md");
    std::fs::write(&md_path, markdown(&report)).map_err(|e| io(&md_path, e))?;
    Ok(report)
}

/// A Qwen2 of `shape` with tied embeddings (as Qwen2.5-0.5B and 1.5B), fan-in scaled; bf16 on
/// disk for the real shapes (CUDA runs safetensors in bf16, the CPU converts to f32).
pub fn write_model(dir: &Path, shape: Shape) -> Result<(), BenchError> {
    // The tiny shape's 256 positions are too few for an 8-answer group's prompt.
    let long = Shape {
        context: shape.context.max(16_384),
        ..shape
    };
    let mut f = FolderOptions::new(long, Arch::Qwen2);
    f.tied = true;
    f.init = Init::FanIn;
    if shape.hidden >= 512 {
        f.dtype = candle_core::DType::BF16;
    }
    random::write_folder(dir, &f).map_err(|e| BenchError::Model(e.to_string()))
}

fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x >= 100.0 => format!("{x:.0}"),
        Some(x) if x >= 1.0 => format!("{x:.2}"),
        Some(x) => format!("{x:.3}"),
        None => "–".into(),
    }
}

/// The report as markdown: one table of the bare model, one of the groups, the step, the check.
pub fn markdown(r: &Value) -> String {
    let mut s = String::from(
        "| shape | device | prompt tokens | prefill tok/s | decode tok/s | load s |\n|---|---|---:|---:|---:|---:|\n",
    );
    let empty = Vec::new();
    let shapes = r["shapes"].as_array().unwrap_or(&empty);
    for sh in shapes {
        for d in sh["devices"].as_array().unwrap_or(&empty) {
            let m = &d["model"];
            s += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                sh["shape"].as_str().unwrap_or(""),
                d["device"].as_str().unwrap_or(""),
                m["prompt_tokens"],
                num(&m["prefill_tok_s"]),
                num(&m["decode_tok_s"]),
                num(&m["load_s"])
            );
        }
    }
    s += "\n| shape | device | trajectories | mode | prefix cache | s/group | prompt tokens | reused | forward passes |\n|---|---|---:|---|---|---:|---:|---:|---:|\n";
    for sh in shapes {
        for d in sh["devices"].as_array().unwrap_or(&empty) {
            for g in d["groups"].as_array().unwrap_or(&empty) {
                s += &format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    sh["shape"].as_str().unwrap_or(""),
                    d["device"].as_str().unwrap_or(""),
                    g["trajectories"],
                    g["mode"].as_str().unwrap_or(""),
                    if g["prefix_cache"] == true {
                        "on"
                    } else {
                        "off"
                    },
                    num(&g["group_s"]),
                    g["prompt_tokens"],
                    g["reused_tokens"],
                    g["forward_passes"]
                );
            }
        }
    }
    let t = &r["train"];
    s += &format!(
        "\nGRPO+LoRA step, {} shape on {}: {} tokens in {} s ({} tokens/s), {} TFLOP/s counted, MFU {}, peak RSS {} MB.\n",
        r["train_shape"].as_str().unwrap_or(""),
        t["device"].as_str().unwrap_or(""),
        t["tokens"],
        num(&t["step_s"]),
        num(&t["tokens_per_s"]),
        num(&t["tflops_per_s"]),
        num(&t["mfu"]),
        t["peak_rss_bytes"].as_u64().map_or("–".into(), |b| (b >> 20).to_string()),
    );
    let c = &r["logits_check"];
    s += &format!(
        "\nLogits, {} vs {} on one prompt of {} tokens: max |Δ| {} (max |logit| {}, tolerance {}), same argmax: {}, agree: {}.\n",
        c["devices"][0].as_str().unwrap_or(""),
        c["devices"][1].as_str().unwrap_or(""),
        c["prompt_tokens"],
        num(&c["max_abs_diff"]),
        num(&c["max_abs_logit"]),
        num(&c["tolerance"]),
        c["same_argmax"],
        c["agree"]
    );
    s
}

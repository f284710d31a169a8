//! What several of the CLI's integration tests share (each test file that needs it declares
//! `mod common;`).

use std::path::Path;

use serde_json::Value;

/// The evaluation records of a metrics file, with those a resumed run superseded removed
/// (those after the iteration it resumed from), without their times.
pub fn evaluations(metrics: &Path) -> Vec<Value> {
    let mut out: Vec<Value> = vec![];
    for line in std::fs::read_to_string(metrics).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        match v["event"].as_str() {
            Some("resume") => {
                let at = v["iteration"].as_u64().unwrap();
                out.retain(|e| e["iteration"].as_u64().unwrap() <= at);
            }
            Some("eval") => {
                let mut e = v.clone();
                let o = e.as_object_mut().unwrap();
                for k in ["event", "train_seconds", "wall_seconds", "images_per_sec"] {
                    o.remove(k);
                }
                out.push(e);
            }
            _ => {}
        }
    }
    out
}

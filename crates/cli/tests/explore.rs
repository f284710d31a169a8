//! `crossbow explore` end to end through the binary, on small LeNet-5 runs: successive halving
//! keeps the right number at each rung and crowns the best at the last one, a target stops
//! the job early, groups fed from the one stream train exactly as `crossbow train` does, the
//! best configuration round-trips through `crossbow train --config`, survivors take the
//! pruned configurations' learners, and every bad search space is refused before anything
//! runs, naming the file, the key and the value.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const BASE: &str = r#"model = "lenet5"
dataset = "synthetic-digits"
epochs = 2
train-size = 2000
test-size = 400
learners-per-device = 1
devices = "cpu"
threads = 2
batch-size = 16
eval-every = 0.5
"#;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("crossbow-explore-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn crossbow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_crossbow")).args(args).output().unwrap()
}

/// Runs `crossbow explore` on `text` in `d`; returns the output and the metrics records.
fn explore(d: &Path, text: &str, extra: &[&str]) -> (Output, Vec<Value>) {
    let cfg = d.join("explore.toml");
    std::fs::write(&cfg, text).unwrap();
    let metrics = d.join("m.jsonl");
    let (c, o, m) = (cfg.to_str().unwrap(), d.join("out"), metrics.to_str().unwrap());
    let mut args = vec!["explore", "--config", c, "--out", o.to_str().unwrap(), "--metrics", m];
    args.extend_from_slice(extra);
    let out = crossbow(&args);
    let records = std::fs::read_to_string(&metrics)
        .map(|t| t.lines().map(|l| serde_json::from_str(l).unwrap()).collect())
        .unwrap_or_default();
    (out, records)
}

fn events<'a>(records: &'a [Value], name: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["event"] == name).collect()
}

fn ok(out: &Output) {
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn halving_keeps_the_right_number_at_each_rung_and_the_best_at_the_last_wins() {
    let d = dir("halving");
    let text = format!("{BASE}[space]\nlr = [0.001, 0.01, 0.03, 0.1]\nbatch-size = [16, 32]\n[select]\neta = 2\n");
    let (out, records) = explore(&d, &text, &[]);
    ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("8 configurations"), "{stdout}");
    // 8 -> 4 -> 2 -> 1, rungs at 1/8, 1/4, 1/2 and all of the budget.
    let rungs = events(&records, "rung");
    let live: Vec<usize> = rungs.iter().map(|r| r["results"].as_array().unwrap().len()).collect();
    let kept: Vec<usize> =
        rungs.iter().map(|r| r["results"].as_array().unwrap().iter().filter(|x| x["kept"] == true).count()).collect();
    assert_eq!(live, vec![8, 4, 2, 1]);
    assert_eq!(kept, vec![4, 2, 1, 1]);
    let fractions: Vec<f64> = rungs.iter().map(|r| r["fraction"].as_f64().unwrap()).collect();
    assert_eq!(fractions, vec![0.125, 0.25, 0.5, 1.0]);
    for r in &rungs {
        let results = r["results"].as_array().unwrap();
        let acc = |x: &&Value| x["accuracy"].as_f64().unwrap();
        let worst_kept = results.iter().filter(|x| x["kept"] == true).map(|x| acc(&x)).fold(1.0, f64::min);
        let best_pruned = results.iter().filter(|x| x["kept"] == false).map(|x| acc(&x)).fold(0.0, f64::max);
        assert!(worst_kept >= best_pruned, "rung {}: kept {worst_kept} < pruned {best_pruned}", r["rung"]);
        // Compared at the same fraction of the budget: within one iteration of the rung.
        for x in results {
            let e = x["epoch"].as_f64().unwrap();
            assert!((e - r["epoch"].as_f64().unwrap()).abs() <= 32.0 / 1984.0 + 1e-9, "{x}");
        }
    }
    // The winner is the best configuration of the last rung, and it trained the whole budget.
    let last = rungs.last().unwrap()["results"].as_array().unwrap();
    let best = last.iter().max_by(|a, b| a["accuracy"].as_f64().unwrap().total_cmp(&b["accuracy"].as_f64().unwrap()));
    let end = events(&records, "end")[0];
    assert_eq!(end["winner"], best.unwrap()["id"]);
    assert_eq!(end["ranking"][0]["id"], end["winner"]);
    assert_eq!(end["ranking"][0]["status"], "winner");
    assert!((end["ranking"][0]["samples"].as_f64().unwrap() / 1984.0 - 2.0).abs() < 0.02, "{end}");
    // Each sample is decoded once for all groups: fewer than they consumed together.
    assert!(end["decoded_samples"].as_u64().unwrap() < end["consumed_samples"].as_u64().unwrap());
    assert!(d.join("out/accuracy.svg").exists() && d.join("out/ranking.txt").exists());
}

#[test]
fn a_target_stops_at_the_first_configuration_that_reaches_it() {
    let d = dir("target");
    // lr 0.03 reaches 40% within its first evaluations; lr 0.001 never does in 2 epochs.
    let text = format!("{BASE}[space]\nlr = [0.001, 0.03]\n[select]\ntarget = 0.4\n");
    let (out, records) = explore(&d, &text, &[]);
    ok(&out);
    let end = events(&records, "end")[0];
    assert_eq!(end["reached_target"], 1, "{end}");
    assert_eq!(end["winner"], 1);
    let ranking = end["ranking"].as_array().unwrap();
    assert_eq!(ranking[0]["status"], "reached target");
    assert!(ranking[0]["accuracy"].as_f64().unwrap() >= 0.4);
    assert!(ranking[1]["status"].as_str().unwrap().starts_with("stopped"), "{end}");
    // It stopped early: neither ran the 2-epoch budget.
    for r in ranking {
        assert!(r["samples"].as_u64().unwrap() < 2 * 1984 - 16, "{r}");
    }
    // Every evaluation before the stop was below the target.
    let evals = events(&records, "eval");
    let hits = evals.iter().filter(|e| e["test_accuracy"].as_f64().unwrap() >= 0.4).count();
    assert_eq!(hits, 1, "only the last evaluation reached the target");
}

/// `(iteration, test_accuracy, test_loss)` of each evaluation.
fn curve<'a>(evals: impl Iterator<Item = &'a Value>) -> Vec<(u64, f64, f64)> {
    evals
        .map(|e| {
            (e["iteration"].as_u64().unwrap(), e["test_accuracy"].as_f64().unwrap(), e["test_loss"].as_f64().unwrap())
        })
        .collect()
}

#[test]
fn groups_fed_from_one_stream_train_bit_for_bit_as_crossbow_train() {
    // Two configurations of one batch size share unit batches that are exactly the batches
    // `crossbow train` draws: each group's evaluations equal a train run of its settings.
    let d = dir("same");
    let text =
        format!("{BASE}learners-per-device = 2\n[space]\nlr = [0.01, 0.03]\n").replace("learners-per-device = 1\n", "");
    let (out, records) = explore(&d, &text, &[]);
    ok(&out);
    let end = events(&records, "end")[0];
    assert_eq!(end["decoded_samples"].as_u64().unwrap() * 2, end["consumed_samples"].as_u64().unwrap());
    for (id, lr) in [(0, "0.01"), (1, "0.03")] {
        let explored = curve(events(&records, "eval").into_iter().filter(|e| e["id"] == id));
        assert_eq!(explored.len(), 4, "evaluations at 0.5, 1, 1.5, 2 epochs");
        let cfg = d.join(format!("train{id}.toml"));
        std::fs::write(
            &cfg,
            format!("{BASE}lr = {lr}\n").replace("learners-per-device = 1", "learners-per-device = 2"),
        )
        .unwrap();
        let m = d.join(format!("train{id}.jsonl"));
        let t = crossbow(&["train", "--config", cfg.to_str().unwrap(), "--metrics", m.to_str().unwrap(), "-q"]);
        ok(&t);
        let text = std::fs::read_to_string(&m).unwrap();
        let recs: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let trained = curve(recs.iter().filter(|r| r["event"] == "eval"));
        assert_eq!(explored, trained, "configuration #{id} (lr {lr})");
    }
}

/// Issue 50, item 7: a rung between evaluation points of the iteration grid (0.5 epochs of
/// 2,000 images at 2 x 16 per iteration: 31.25 iterations) is reached where `crossbow train`
/// evaluates (iteration 32), not at the nearest boundary (31): every configuration's
/// evaluations, pruned or not, are those of its `crossbow train` run (a prefix of them).
#[test]
fn rung_evaluations_are_those_of_crossbow_train() {
    let d = dir("rungs");
    let text = format!("{BASE}learners-per-device = 2\n[space]\nlr = [0.01, 0.03]\n[select]\neta = 2\n")
        .replace("learners-per-device = 1\n", "")
        .replace("epochs = 2\n", "epochs = 1\n");
    let (out, records) = explore(&d, &text, &[]);
    ok(&out);
    for (id, lr) in [(0, "0.01"), (1, "0.03")] {
        let explored = curve(events(&records, "eval").into_iter().filter(|e| e["id"] == id));
        assert_eq!(explored[0].0, 32, "#{id}: the rung's evaluation at iteration 32: {explored:?}");
        let cfg = d.join(format!("train{id}.toml"));
        let base =
            BASE.replace("learners-per-device = 1", "learners-per-device = 2").replace("epochs = 2\n", "epochs = 1\n");
        std::fs::write(&cfg, format!("{base}lr = {lr}\n")).unwrap();
        let m = d.join(format!("train{id}.jsonl"));
        let t = crossbow(&["train", "--config", cfg.to_str().unwrap(), "--metrics", m.to_str().unwrap(), "-q"]);
        ok(&t);
        let text = std::fs::read_to_string(&m).unwrap();
        let recs: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let trained = curve(recs.iter().filter(|r| r["event"] == "eval"));
        assert_eq!(explored, trained[..explored.len()], "configuration #{id} (lr {lr})");
    }
}

/// The JSON `crossbow train --dry-run` prints before the memory table.
fn dry_run(config: &Path) -> Value {
    let out = crossbow(&["train", "--config", config.to_str().unwrap(), "--dry-run"]);
    ok(&out);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let end = text.find("\n}").unwrap() + 2;
    serde_json::from_str(&text[..end]).unwrap()
}

#[test]
fn the_best_configuration_round_trips_through_crossbow_train() {
    let d = dir("best");
    let text = format!(
        "{BASE}[space]\nlr = {{ min = 0.003, max = 0.03, steps = 2, scale = \"log\" }}\nbatch-size = [16, 32]\nsync = [\"sma\", \"ssgd\"]\n[select]\neta = 4\n"
    );
    let (out, records) = explore(&d, &text, &[]);
    ok(&out);
    let end = events(&records, "end")[0];
    let settings: Vec<(String, String)> = serde_json::from_value(end["winner_settings"].clone()).unwrap();
    let cfg = dry_run(&d.join("out/best.toml"));
    for (k, v) in &settings {
        let got = match k.as_str() {
            "lr" => cfg["lr"].to_string(),
            "batch-size" => cfg["batch-size"].to_string(),
            "sync" => cfg["sync"].as_str().unwrap().to_string(),
            other => panic!("unexpected key {other}"),
        };
        assert_eq!(&got, v, "{k}");
    }
    // The rest is the base file's.
    assert_eq!(cfg["train-size"], 2000);
    assert_eq!(cfg["epochs"], 2.0);
    assert_eq!(cfg["model"], "lenet5");
}

#[test]
fn survivors_take_the_learners_of_pruned_configurations() {
    let d = dir("grow");
    let text =
        format!("{BASE}max-learners = 2\n[space]\nlr = [0.001, 0.01, 0.03, 0.1]\n[select]\neta = 2\ngrow = true\n");
    let (out, records) = explore(&d, &text, &[]);
    ok(&out);
    let rungs = events(&records, "rung");
    // Rung 1 prunes two one-learner configurations: each survivor takes one learner (max 2).
    let kept: Vec<&Value> = rungs[0]["results"].as_array().unwrap().iter().filter(|x| x["kept"] == true).collect();
    assert_eq!(kept.len(), 2);
    let grown: Vec<&Value> = events(&records, "grow");
    assert_eq!(grown.len(), 2, "{grown:?}");
    for x in &kept {
        assert!(grown.iter().any(|g| g["id"] == x["id"] && g["learners"] == serde_json::json!([2])));
    }
    // At the next rung the survivor is at max-learners already: nobody grows past it.
    for r in &rungs[1..] {
        for x in r["results"].as_array().unwrap() {
            assert_eq!(x["learners"], serde_json::json!([2]), "{x}");
        }
    }
}

/// A bad file: exit code 2, one line naming the file, the key and the value; nothing ran.
fn refused(name: &str, space: &str, words: &[&str]) {
    let d = dir(name);
    let (out, records) = explore(&d, &format!("{BASE}{space}"), &[]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    let file = d.join("explore.toml");
    assert!(err.contains(&format!("config file {}", file.display())), "{err}");
    for w in words {
        assert!(err.contains(w), "'{w}' missing from: {err}");
    }
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(records.is_empty() && !d.join("out").exists(), "something ran");
}

#[test]
fn an_empty_list_is_refused() {
    refused("empty", "[space]\nlr = []\n", &["[space] lr", "empty"]);
}

#[test]
fn an_unknown_space_key_is_refused() {
    refused("unknown", "[space]\nbach-size = [16, 32]\n", &["[space] bach-size", "unknown key"]);
}

#[test]
fn an_unknown_select_key_is_refused() {
    refused("unknown-select", "[space]\nlr = [0.1]\n[select]\nfactor = 2\n", &["[select] factor", "unknown key"]);
}

#[test]
fn an_inverted_range_is_refused() {
    refused(
        "inverted",
        "[space]\nlr = { min = 0.1, max = 0.01, steps = 3 }\n",
        &["[space] lr", "min = 0.1", "max = 0.01"],
    );
}

#[test]
fn a_learning_rate_the_trainer_rejects_is_refused() {
    refused("negative-lr", "[space]\nlr = [0.1, -0.5]\n", &["[space] lr = -0.5", "positive"]);
}

#[test]
fn a_batch_size_the_trainer_rejects_is_refused() {
    refused("zero-batch", "[space]\nbatch-size = [16, 0]\n", &["[space] batch-size = 0", "at least 1"]);
}

#[test]
fn an_unknown_synchroniser_is_refused() {
    refused("sync", "[space]\nsync = [\"sma\", \"hogwild\"]\n", &["[space] sync = \"hogwild\"", "hogwild"]);
}

#[test]
fn a_momentum_out_of_range_is_refused() {
    refused("momentum", "[space]\nmomentum = [0.9, 1.5]\n", &["[space] momentum = 1.5", "[0, 1)"]);
}

#[test]
fn a_batch_larger_than_the_train_set_is_refused() {
    refused("big-batch", "[space]\nbatch-size = [16, 4096]\n", &["batch-size 4096", "2000 images"]);
}

#[test]
fn too_many_configurations_are_refused_with_the_count() {
    let lrs = (1..=9).map(|i| format!("0.0{i}")).collect::<Vec<_>>().join(", ");
    refused(
        "too-many",
        &format!("[space]\nlr = [{lrs}]\nmomentum = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]\n"),
        &["72 configurations", "lr 9 x momentum 8", "at most 64"],
    );
}

#[test]
fn a_repeated_value_is_refused() {
    refused("repeat", "[space]\nbatch-size = [16, 32, 16]\n", &["[space] batch-size", "16 appears twice"]);
}

/// Issue 26, item 11: a configuration that diverges (learning rate 100, or α 2.0) is marked
/// diverged and dropped; the others finish, the ranking lists it last, best.toml is written;
/// the plot shows every configuration (a marker per evaluation) with the legend beside it;
/// no configuration is evaluated twice at the same rung epoch.
#[test]
fn a_diverging_configuration_is_dropped_and_the_search_goes_on() {
    let d = dir("diverge");
    let text =
        format!("{BASE}learners-per-device = 2\nsync = \"sma\"\n[space]\nlr = [0.01, 100.0]\nalpha = [0.5, 1.0]\n[select]\neta = 2\n")
            .replace("learners-per-device = 1\n", "");
    let (out, records) = explore(&d, &text, &[]);
    ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("diverged at epoch"), "{stdout}");
    let diverged = events(&records, "diverged");
    assert!(diverged.len() >= 2, "lr 100 diverges with either alpha: {diverged:?}");
    let end = events(&records, "end");
    let ranking = end[0]["ranking"].as_array().unwrap();
    let last = ranking.last().unwrap()["status"].as_str().unwrap();
    assert!(last.starts_with("diverged"), "{ranking:?}");
    assert!(ranking[0]["status"] == "winner", "{ranking:?}");
    assert!(d.join("out/best.toml").exists());
    // Every configuration is in the plot, evaluated ones with a marker.
    let svg = std::fs::read_to_string(d.join("out/accuracy.svg")).unwrap();
    for i in 0..4 {
        assert!(svg.contains(&format!("#{i} ")), "configuration #{i} missing from the legend");
    }
    assert!(svg.contains("<circle"), "no evaluation markers");
    // No two evaluations of one configuration at the same (rounded) epoch.
    for id in 0..4 {
        let epochs: Vec<String> = events(&records, "eval")
            .iter()
            .filter(|e| e["id"] == id)
            .map(|e| format!("{:.2}", e["epoch"].as_f64().unwrap()))
            .collect();
        let mut uniq = epochs.clone();
        uniq.dedup();
        assert_eq!(epochs, uniq, "configuration #{id} evaluated twice at one epoch");
    }
}

/// Issue 50, item 3: a signal stops an exploration cleanly (exit 130): the ranking so far,
/// its leader as best.toml, and its state; `--resume` continues it to the same evaluations,
/// rungs and winner as a run never stopped, and appends to the same metrics.
#[test]
fn a_stopped_exploration_resumes_to_the_same_result() {
    let text = format!("{BASE}learners-per-device = 2\n[space]\nlr = [0.001, 0.01, 0.03, 0.1]\n[select]\neta = 2\n")
        .replace("learners-per-device = 1\n", "");
    let whole = dir("stop-whole");
    let (out, full) = explore(&whole, &text, &[]);
    ok(&out);
    let d = dir("stop");
    let cfg = d.join("explore.toml");
    std::fs::write(&cfg, &text).unwrap();
    let (o, m) = (d.join("out"), d.join("m.jsonl"));
    let args =
        ["explore", "--config", cfg.to_str().unwrap(), "--out", o.to_str().unwrap(), "--metrics", m.to_str().unwrap()];
    let stopped = Command::new(env!("CARGO_BIN_EXE_crossbow"))
        .args(args)
        .env("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", "150")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(130), "{err}");
    assert!(err.contains("stopped by SIGINT (Ctrl-C) after 150 steps") && err.contains("--resume"), "{err}");
    assert!(o.join("ranking.txt").exists() && o.join("best.toml").exists() && o.join("state/explore.json").exists());
    // A new exploration into the same folder is refused while the state is there.
    let again = crossbow(&args);
    assert_eq!(again.status.code(), Some(2), "{}", String::from_utf8_lossy(&again.stderr));
    let mut resume = args.to_vec();
    resume.push("--resume");
    let r = crossbow(&resume);
    ok(&r);
    assert!(!o.join("state").exists(), "the state of a finished exploration is removed");
    let records: Vec<Value> =
        std::fs::read_to_string(&m).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let key = |e: &&Value| (e["id"].as_u64().unwrap(), e["iteration"].as_u64().unwrap());
    let evals = |rs: &[Value]| {
        let mut v: Vec<(u64, u64, f64, f64)> = events(rs, "eval")
            .iter()
            .map(|e| (key(e).0, key(e).1, e["test_accuracy"].as_f64().unwrap(), e["test_loss"].as_f64().unwrap()))
            .collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v
    };
    assert_eq!(evals(&records), evals(&full), "evaluations differ after a stop and a resume");
    let rungs = |rs: &[Value]| events(rs, "rung").iter().map(|r| r["results"].clone()).collect::<Vec<_>>();
    let strip = |v: Vec<Value>| v.into_iter().map(|r| r.to_string()).collect::<Vec<_>>();
    assert_eq!(strip(rungs(&records)), strip(rungs(&full)));
    assert_eq!(events(&records, "end")[0]["winner"], events(&full, "end")[0]["winner"]);
    assert_eq!(events(&records, "interrupted").len(), 1);
    assert_eq!(events(&records, "resume").len(), 1);
}

#[test]
fn a_global_batch_is_refused_with_the_reason() {
    let d = dir("global-batch");
    let (out, records) = explore(
        &d,
        &format!("global-batch-size = 64\n{}[space]\nlr = [0.1, 0.05]\n", BASE.replace("batch-size = 16\n", "")),
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("global-batch-size 64: crossbow explore gives every learner a batch of --batch-size"),
        "{err}"
    );
    assert!(records.is_empty() && !d.join("out").exists(), "something ran");
}

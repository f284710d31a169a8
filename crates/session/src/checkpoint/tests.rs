//! Unit tests of the checkpoint folder: lines, listing, rotation, loading, locks.

use std::path::{Path, PathBuf};

use crossbow_replica::checkpoint::CheckpointFile;

use super::*;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("crossbow-cli-ckpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn line() -> Line {
    Line { run: "00000000000000aa".into(), tag: "0000000a".into() }
}

fn file(i: u64) -> CheckpointFile {
    let mut f = CheckpointFile::new(serde_json::json!({ "iteration": i, "line": line() }));
    f.tensors.insert("w".into(), crossbow_replica::checkpoint::Tensor::vector(vec![i as f32; 10]));
    f
}

#[test]
fn every_parses_iterations_and_minutes() {
    assert_eq!("500".parse::<Every>().unwrap(), Every::Iterations(500));
    assert_eq!("10m".parse::<Every>().unwrap(), Every::Seconds(600.0));
    assert_eq!("0.5m".parse::<Every>().unwrap(), Every::Seconds(30.0));
    for bad in ["0", "-3", "m", "1e400m", "10s", "", "0m", "1e18m"] {
        let e = bad.parse::<Every>().unwrap_err();
        assert!(e.contains(&format!("'{bad}'")), "{e}");
    }
}

#[test]
fn keeps_the_newest_and_never_the_only_good_one() {
    let dir = tmp("keep");
    let policy = CheckpointPolicy {
        dir: dir.clone(),
        every: Every::Iterations(1),
        keep: 2,
        on_error: OnWriteError::Warn,
        share: false,
    };
    let mut c = Checkpointer::start(policy, 0, line()).unwrap();
    for i in 1..=5 {
        c.submit(i, file(i)).unwrap();
    }
    let done = c.flush();
    assert_eq!(done.len(), 5);
    let left: Vec<u64> = list(&dir).unwrap().into_iter().map(|e| e.iteration).collect();
    assert_eq!(left, vec![5, 4]);
    assert_eq!(c.last_good(), Some(dir.join(file_name(5, &line().tag)).as_path()));
    let (p, f) = load(&dir, &mut |_| {}).unwrap();
    assert_eq!(p, dir.join(file_name(5, &line().tag)));
    assert_eq!(f.state["iteration"], 5);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_damaged_newest_checkpoint_falls_back_to_the_previous() {
    let dir = tmp("damaged");
    let policy = CheckpointPolicy {
        dir: dir.clone(),
        every: Every::Iterations(1),
        keep: 3,
        on_error: OnWriteError::Warn,
        share: false,
    };
    let mut c = Checkpointer::start(policy, 0, line()).unwrap();
    c.submit(1, file(1)).unwrap();
    c.submit(2, file(2)).unwrap();
    c.flush();
    let newest = dir.join(file_name(2, &line().tag));
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() - 5]).unwrap();
    let mut warnings = vec![];
    let (p, f) = load(&dir, &mut |w| warnings.push(w)).unwrap();
    assert_eq!(p, dir.join(file_name(1, &line().tag)));
    assert_eq!(f.state["iteration"], 1);
    assert!(warnings[0].contains(&file_name(2, &line().tag)), "{warnings:?}");
    // Naming the damaged file itself is an error that names it.
    let e = load(&newest, &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains(&file_name(2, &line().tag)), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_folder_that_cannot_be_made_is_refused_before_training() {
    let dir = tmp("notdir");
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    std::fs::write(&dir, b"a file").unwrap();
    let policy = CheckpointPolicy {
        dir: dir.clone(),
        every: Every::Iterations(1),
        keep: 1,
        on_error: OnWriteError::Warn,
        share: false,
    };
    let e = Checkpointer::start(policy.clone(), 0, line()).err().unwrap().to_string();
    assert!(e.contains("--checkpoint-dir") && e.contains("not a folder"), "{e}");
    let policy = CheckpointPolicy { dir: dir.join("sub"), ..policy };
    let e = Checkpointer::start(policy, 0, line()).err().unwrap().to_string();
    assert!(e.contains("cannot create"), "{e}");
    std::fs::remove_file(&dir).unwrap();
}

#[test]
fn leftover_temporary_files_are_removed_at_start() {
    let dir = tmp("leftover");
    std::fs::create_dir_all(&dir).unwrap();
    let t = dir.join(format!(".{}.tmp", file_name(7, &line().tag)));
    std::fs::write(&t, b"half a checkpoint").unwrap();
    let policy = CheckpointPolicy {
        dir: dir.clone(),
        every: Every::Iterations(1),
        keep: 1,
        on_error: OnWriteError::Warn,
        share: false,
    };
    let _c = Checkpointer::start(policy, 0, line()).unwrap();
    assert!(!t.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn flags_resolve_with_their_dependencies() {
    let a = CheckpointArgs { on_divergence: Some(OnDivergence::Rollback), ..Default::default() };
    assert!(a.resolve(None, None).unwrap_err().to_string().contains("needs --checkpoint-dir"));
    let a = CheckpointArgs { checkpoint_every: Some(Every::Iterations(5)), ..Default::default() };
    assert!(a.resolve(None, None).unwrap_err().to_string().contains("--checkpoint-every needs --checkpoint-dir"));
    assert!("ignore".parse::<OnWriteError>().unwrap_err().contains("'ignore'"));
    // Resuming: the saved policy and the checkpoint's folder are the defaults.
    let (p, d) =
        CheckpointArgs::default().resolve(None, Some(Path::new("/runs/a/ckpt-0000000010.safetensors"))).unwrap();
    assert_eq!(p.unwrap().dir, PathBuf::from("/runs/a"));
    assert_eq!(d.action, OnDivergence::Stop);
}

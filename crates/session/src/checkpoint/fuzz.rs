//! Fuzzing the resume paths (issue 26): random folder contents — this run's checkpoints on
//! several lines, another run's, files of an older version, junk named like checkpoints,
//! folders named like checkpoints — never make listing, loading, the ownership check or
//! rotation panic, and rotation never deletes a file of another line.

use std::path::Path;

use crossbow_replica::checkpoint::CheckpointFile;

use super::*;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Item {
    /// A checkpoint of run `run` (0 or 1), line `tag` (0..3), at `iteration`.
    Ckpt { run: u8, tag: u8, iteration: u64 },
    /// An untagged checkpoint of an older version.
    Legacy { iteration: u64 },
    /// Junk bytes under a checkpoint's name.
    Junk { tag: u8, iteration: u64, bytes: Vec<u8> },
    /// A folder under a checkpoint's name.
    Folder { iteration: u64 },
}

fn line_of(run: u8, tag: u8) -> Line {
    Line { run: format!("{:016x}", run as u64 + 1), tag: format!("{:08x}", 16 * run as u64 + tag as u64 + 0xa0) }
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        4 => (0u8..2, 0u8..3, 0u64..50).prop_map(|(run, tag, iteration)| Item::Ckpt { run, tag, iteration }),
        1 => (0u64..50).prop_map(|iteration| Item::Legacy { iteration }),
        1 => (0u8..3, 0u64..50, prop::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(tag, iteration, bytes)| Item::Junk { tag, iteration, bytes }),
        1 => (0u64..50).prop_map(|iteration| Item::Folder { iteration }),
    ]
}

fn make(dir: &Path, items: &[Item]) {
    for it in items {
        match it {
            Item::Ckpt { run, tag, iteration } => {
                let l = line_of(*run, *tag);
                let mut f = CheckpointFile::new(serde_json::json!({
                    "iteration": iteration, "line": l, "written_at": *iteration as f64,
                    "config": { "model": "lenet5", "dataset": "synthetic-digits", "seed": run },
                }));
                f.tensors.insert("w".into(), crossbow_replica::checkpoint::Tensor::vector(vec![1.0; 3]));
                f.write_atomic(&dir.join(file_name(*iteration, &l.tag))).unwrap();
            }
            Item::Legacy { iteration } => {
                let f = CheckpointFile::new(serde_json::json!({ "iteration": iteration }));
                f.write_atomic(&dir.join(format!("ckpt-{iteration:010}.safetensors"))).unwrap();
            }
            Item::Junk { tag, iteration, bytes } => {
                std::fs::write(dir.join(file_name(*iteration, &line_of(0, *tag).tag)), bytes).unwrap();
            }
            Item::Folder { iteration } => {
                let _ = std::fs::create_dir_all(dir.join(file_name(*iteration, "ffffffff")));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn resume_paths_survive_any_folder(items in prop::collection::vec(item(), 0..12), case in any::<u32>()) {
        let dir = std::env::temp_dir().join(format!("crossbow-ckpt-fuzz-{}-{case}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        make(&dir, &items);
        let before: Vec<Entry> = list(&dir).unwrap();
        // The runs whose checkpoints the folder holds at the end: a later item may overwrite
        // an earlier one of the same name (junk over run 0's checkpoint, or the reverse).
        let mut owner: std::collections::BTreeMap<String, Option<u8>> = Default::default();
        for it in &items {
            match it {
                Item::Ckpt { run, tag, iteration } => {
                    owner.insert(file_name(*iteration, &line_of(*run, *tag).tag), Some(*run));
                }
                Item::Junk { tag, iteration, .. } => {
                    owner.insert(file_name(*iteration, &line_of(0, *tag).tag), None);
                }
                Item::Legacy { .. } | Item::Folder { .. } => {}
            }
        }
        let runs: std::collections::BTreeSet<u8> = owner.values().flatten().copied().collect();
        // Loading: never a panic; a folder of two runs is refused by name.
        match load(&dir, &mut |_| {}) {
            Ok((p, f)) => {
                prop_assert!(runs.len() <= 1, "resumed {} from a folder of {} runs", p.display(), runs.len());
                prop_assert!(f.state.get("iteration").is_some());
            }
            Err(e) => prop_assert!(e.to_string().contains(&dir.display().to_string()), "{e}"),
        }
        // The ownership check refuses a new run exactly when another run's file is there.
        let mine = line_of(0, 0);
        let refused = check_owner(&dir, &mine, false, "--checkpoint-dir").is_err();
        prop_assert_eq!(refused, runs.contains(&1));
        prop_assert!(check_owner(&dir, &mine, true, "--checkpoint-dir").is_ok());
        // Line decisions never panic, whatever the state says.
        for e in &before {
            if let Ok(state) = CheckpointFile::read_state(&e.path) {
                let _ = line_for_resume(&state, &e.path, &dir);
            }
        }
        // Rotation by line (run 0, tag 0) removes only that line's files.
        rotate(&dir, 1, &mine.tag, u64::MAX);
        let after: Vec<Entry> = list(&dir).unwrap();
        for e in &before {
            if e.tag.as_deref() != Some(mine.tag.as_str()) {
                prop_assert!(after.contains(e), "rotation of line {} deleted {}", mine.tag, e.path.display());
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

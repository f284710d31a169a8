//! `crossbow bench` as one job of several ranks, and `explore` / `experiment tta` refusing to
//! run once per rank. The tests with `mpirun` need the feature `mpi` and Open MPI's `mpirun`
//! on the PATH (CI's MPI section); the others fake a launcher's environment and run in every
//! build.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers: a failure should fail the test.

use std::process::{Command, Output};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_crossbow")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Rank `rank` of 2 as Open MPI's `mpirun` would start it (its environment only: no MPI job).
fn as_rank(rank: usize, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("OMPI_COMM_WORLD_RANK", rank.to_string())
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .output()
        .unwrap()
}

fn refused(out: &Output, command: &str) {
    let (_, err) = text(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("`crossbow {command}` runs as one process")) && err.contains("2 ranks"),
        "{command}: {err}"
    );
}

/// Each rank of a launch refuses `explore` and `experiment tta` before reading anything (the
/// config named does not exist), in one line.
#[test]
fn explore_and_experiment_refuse_to_run_once_per_rank() {
    for rank in [0, 1] {
        let out = as_rank(rank, &["explore", "--config", "no-such-explore.toml"]);
        refused(&out, "explore");
        assert_eq!(text(&out).1.lines().count(), 1, "{}", text(&out).1);
    }
    refused(&as_rank(0, &["experiment", "tta", "--seeds", "1"]), "experiment tta");
    // Negative control: started by hand, explore gets as far as reading its config.
    let (_, err) = text(&Command::new(bin()).args(["explore", "--config", "no-such-explore.toml"]).output().unwrap());
    assert!(err.contains("no-such-explore.toml") && !err.contains("runs as one process"), "{err}");
}

/// Started as one of several ranks, a bench built without MPI refuses as `train` does.
#[cfg(not(feature = "mpi"))]
#[test]
fn bench_ranks_of_a_build_without_mpi_are_refused() {
    let out = as_rank(1, &["bench", "--model", "lenet5", "--iterations", "1"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("rank 1 of 2 started by Open MPI") && err.contains("--features mpi"), "{err}");
}

#[cfg(feature = "mpi")]
mod under_mpirun {
    use super::*;
    use serde_json::Value;

    /// `mpirun` as root in a container needs these; harmless otherwise.
    fn mpirun(np: usize) -> Command {
        let mut c = Command::new("mpirun");
        c.args(["--oversubscribe", "-np", &np.to_string()])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
        c
    }

    const BENCH: [&str; 15] = [
        "bench",
        "--model",
        "lenet5",
        "--batch-size",
        "16",
        "--learners",
        "1",
        "--devices",
        "cpu:1",
        "--threads",
        "1",
        "--iterations",
        "3",
        "--warmup",
        "1",
    ];

    fn bench_json(out: &Output, json: &std::path::Path) -> Value {
        let (stdout, err) = text(out);
        assert!(out.status.success(), "bench failed: {stdout}\n{err}");
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
    }

    #[test]
    fn two_ranks_bench_as_one_job_and_rank_0_reports_it() {
        let dir = std::env::temp_dir().join(format!("crossbow-mpi-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (one, two) = (dir.join("one.json"), dir.join("two.json"));

        // One process: 1 learner of 16 images per iteration.
        let alone = Command::new(bin()).args(BENCH).arg("--json").arg(&one).output().unwrap();
        let alone = bench_json(&alone, &one);
        let per_iteration = alone["rows"][0]["images"].as_u64().unwrap() / 3;
        assert_eq!(per_iteration, 16, "{alone}");
        assert_eq!(alone["ranks"], 1);
        assert!(alone["rows"][0]["rank_allreduce"].is_null(), "{alone}");

        let out = mpirun(2).arg(bin()).args(BENCH).arg("--json").arg(&two).output().unwrap();
        let job = bench_json(&out, &two);
        let (stdout, err) = text(&out);
        // One table, from rank 0: its header and one row.
        assert_eq!(stdout.matches("| model |").count(), 1, "{stdout}\n{err}");
        assert_eq!(stdout.lines().filter(|l| l.starts_with("| lenet5 |")).count(), 1, "{stdout}");
        assert_eq!(err.matches("sync ssgd").count(), 1, "{err}");
        assert_eq!(job["ranks"], 2, "{job}");
        let row = &job["rows"][0];
        assert_eq!((row["ranks"].as_u64(), row["learners_total"].as_u64()), (Some(2), Some(2)), "{row}");
        // The job's images: 2 ranks x one process's images per iteration x 3 iterations.
        assert_eq!(row["images"].as_u64(), Some(2 * per_iteration * 3), "{row}");
        let ips = row["images_per_sec"].as_f64().unwrap();
        let secs = row["seconds"].as_f64().unwrap();
        assert!((ips * secs - (2 * per_iteration * 3) as f64).abs() < 1e-6, "{row}");
        // Every iteration's all-reduce between the 2 ranks, on both ranks.
        let ar = &row["rank_allreduce"];
        assert_eq!(ar["count"].as_u64(), Some(6), "{row}");
        let (median, mean) = (ar["median_seconds"].as_f64().unwrap(), ar["mean_seconds"].as_f64().unwrap());
        assert!(median > 0.0 && mean > 0.0 && median < secs, "{row}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn explore_and_experiment_under_two_ranks_exit_2_saying_why() {
        let out = mpirun(2).arg(bin()).args(["explore", "--config", "no-such-explore.toml"]).output().unwrap();
        refused(&out, "explore");
        let out = mpirun(2).arg(bin()).args(["experiment", "tta", "--seeds", "1"]).output().unwrap();
        refused(&out, "experiment tta");
        assert!(text(&out).1.contains("this is rank 0"), "rank 0 says it: {}", text(&out).1);
    }

    #[test]
    fn the_bench_tuner_with_two_ranks_is_refused() {
        let out = mpirun(2).arg(bin()).args(BENCH).arg("--tuner").output().unwrap();
        let (stdout, err) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stdout}\n{err}");
        assert!(err.contains("--tuner with 2 ranks") && err.contains("one process"), "{err}");
        assert!(!stdout.contains("| model |"), "nothing measured: {stdout}");
    }
}

//! `ProcessGroup::broadcast_bytes` over `mpirun --oversubscribe -np 2` (feature `mpi`): the
//! test runs itself under `mpirun` (the ranks take the `CROSSBOW_BCAST_RANK` branch), and
//! every rank must end with root's bytes, for roots 0 and 1, a long and an empty string; then
//! rank 0's NCCL unique id (made with `ncclGetUniqueId`, no GPU needed) must reach every rank
//! unchanged. Without NCCL on the library path that part says "skipped" (`CROSSBOW_REQUIRE_NCCL=1`
//! makes it fail); without `mpirun` the whole test says "skipped".
#![cfg(feature = "mpi")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failure should fail the test.

use std::process::Command;
use std::time::Duration;

use crossbow_mpi::MpiGroup;
use crossbow_replica::ProcessGroup;
use crossbow_replica::engine::nccl::shared_id;

const CHILD: &str = "CROSSBOW_BCAST_RANK";

fn pattern(root: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + root * 7) % 251) as u8).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One rank's part (inside `mpirun`): prints `rank R ok` or the failure, and `rank R nccl HEX`.
fn rank_main() {
    let g = MpiGroup::init(Duration::from_secs(30)).unwrap();
    let me = g.rank();
    for (root, len) in [(0, 1000), (1, 17), (0, 0)] {
        let mut b = if me == root { pattern(root, len) } else { vec![0xEE; 5] };
        g.broadcast_bytes(root, &mut b).unwrap();
        assert_eq!(b, pattern(root, len), "rank {me}: broadcast from {root} of {len} bytes");
    }
    let e = g.broadcast_bytes(2, &mut Vec::new()).unwrap_err().to_string();
    assert!(e.contains("root rank 2 does not exist"), "{e}");
    println!("rank {me} ok");
    match shared_id(&g) {
        Ok(id) => println!("rank {me} nccl {}", hex(id.as_bytes())),
        Err(e) => println!("rank {me} nccl-skipped {e}"),
    }
}

#[test]
fn bytes_and_the_nccl_id_reach_every_rank() {
    if std::env::var_os(CHILD).is_some() {
        rank_main();
        return;
    }
    if Command::new("mpirun").arg("--version").output().is_err() {
        eprintln!("skipped: no mpirun on the PATH");
        return;
    }
    let out = Command::new("mpirun")
        .args(["--oversubscribe", "-np", "2"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "bytes_and_the_nccl_id_reach_every_rank", "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "mpirun failed:\n{text}");
    for r in 0..2 {
        assert!(text.contains(&format!("rank {r} ok")), "rank {r} did not finish:\n{text}");
    }
    let ids: Vec<&str> = text.lines().filter_map(|l| l.split_once(" nccl ").map(|(_, h)| h.trim())).collect();
    if ids.is_empty() {
        let why = text.lines().find(|l| l.contains("nccl-skipped")).unwrap_or("no output");
        assert!(std::env::var("CROSSBOW_REQUIRE_NCCL").as_deref() != Ok("1"), "NCCL required: {why}");
        eprintln!("skipped: the NCCL id part ({why})");
        return;
    }
    assert_eq!(ids.len(), 2, "{text}");
    assert_eq!(ids[0].len(), 256, "{text}");
    assert_eq!(ids[0], ids[1], "the ranks hold different NCCL ids:\n{text}");
    assert!(ids[0].chars().any(|c| c != '0'), "{text}");
    eprintln!("NCCL id on both ranks: {}...", &ids[0][..32]);
}

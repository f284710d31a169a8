//! `MpiGroup`'s collectives across real ranks (feature `mpi`; needs Open MPI's `mpirun`): the
//! test starts itself under `mpirun --oversubscribe -np N`, each rank runs [`rank_body`].
//!
//! The sums are checked on numbers whose f32 sum depends on the order of the additions, so a
//! sum in any order other than rank order (what one process does with its devices) fails.
#![cfg(feature = "mpi")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failure should fail the test.

use std::process::Command;
use std::time::Duration;

use crossbow_mpi::MpiGroup;
use crossbow_replica::ProcessGroup;

const ROLE: &str = "CROSSBOW_DIST_TEST_RANK";

/// Rank `r`'s contribution: element `e` is one of `1e8, -1e8, 1` in an order that depends on
/// `e`, so that every order of adding the ranks gives another result somewhere.
fn contribution(r: usize, size: usize) -> Vec<f32> {
    let vals = [1e8f32, -1e8, 1.0, 3.0, -7.5e7];
    (0..12)
        .map(|e| vals[(r * (e + 1) + e) % vals.len()] * if (e + r).is_multiple_of(2) { 1.0 } else { 0.5 } + size as f32)
        .collect()
}

fn rank_body() {
    let g = MpiGroup::init(Duration::from_secs(30)).unwrap();
    let (rank, size) = (g.rank(), g.size());
    // Sums: rank order, identical on every rank.
    let mut buf = contribution(rank, size);
    g.all_reduce_sum_f32(&mut buf).unwrap();
    let mut want = contribution(0, size);
    for r in 1..size {
        for (w, v) in want.iter_mut().zip(contribution(r, size)) {
            *w += v;
        }
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&buf), bits(&want), "rank {rank}: the sum is not in rank order");
    let mut d = vec![rank as f64 + 0.25, 1e300];
    g.all_reduce_sum_f64(&mut d).unwrap();
    assert_eq!(d[0], (0..size).map(|r| r as f64 + 0.25).sum::<f64>());
    assert_eq!(g.all_gather_u64(rank as u64 * 10).unwrap(), (0..size as u64).map(|r| r * 10).collect::<Vec<_>>());
    // Bytes: a broadcast from the last rank, and a gather of parts of different lengths.
    let root = size - 1;
    let mut b = if rank == root { (0..5000u32).map(|i| (i % 251) as u8).collect() } else { vec![9u8; 3] };
    g.broadcast_bytes(root, &mut b).unwrap();
    assert_eq!(b, (0..5000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>(), "rank {rank}");
    let part: Vec<u8> = (0..rank * 1000 + 3).map(|i| (i + rank) as u8).collect();
    let all = g.gather_bytes(0, &part).unwrap();
    if rank == 0 {
        assert_eq!(all.len(), size);
        for (r, p) in all.iter().enumerate() {
            assert_eq!(p, &(0..r * 1000 + 3).map(|i| (i + r) as u8).collect::<Vec<_>>(), "rank {r}'s part");
        }
    } else {
        assert!(all.is_empty());
    }
    assert!(g.gather_bytes(size, &part).is_err(), "a root that does not exist is refused");
}

#[test]
fn sums_add_in_rank_order_and_bytes_travel() {
    if std::env::var_os(ROLE).is_some() {
        rank_body();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for np in [2, 3, 4] {
        let out = Command::new("mpirun")
            .args(["--oversubscribe", "-np", &np.to_string()])
            .arg(&exe)
            .args(["--exact", "sums_add_in_rank_order_and_bytes_travel", "--test-threads", "1"])
            .env(ROLE, "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mpirun -np {np}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

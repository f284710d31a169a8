//! The memory plan: tensors of a [`Program`] mapped onto a few reusable buffers ("slots").
//!
//! Each tensor storage (in-place outputs share their input's) lives from the instruction
//! that first writes it to the last one that reads it. Walking the program in order, a
//! storage takes the free slot whose size fits best (or grows the largest free one, or opens
//! a new slot), and gives the slot back after its last reader. A slot freed by instruction
//! `i` is only reused by tensors first written after `i`, so no instruction ever reads and
//! writes the same buffer (except the in-place ops, which do so on purpose).

use serde::Serialize;

use crate::program::{Program, TensorId};

/// Where every tensor lives.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryPlan {
    /// Size (elements) of each slot.
    pub slot_len: Vec<usize>,
    /// Slot of each tensor (by tensor id).
    pub slot_of: Vec<usize>,
    /// Elements if every tensor had its own buffer.
    pub unplanned_len: usize,
}

impl MemoryPlan {
    /// Elements of all slots together. (A program from [`crate::program::lower`] has its
    /// sizes checked against overflow; for any other, the sums saturate rather than wrap.)
    pub fn planned_len(&self) -> usize {
        self.slot_len.iter().fold(0usize, |a, &n| a.saturating_add(n))
    }

    /// Bytes of all slots (f32).
    pub fn planned_bytes(&self) -> usize {
        self.planned_len().saturating_mul(4)
    }

    /// Bytes without reuse (f32).
    pub fn unplanned_bytes(&self) -> usize {
        self.unplanned_len.saturating_mul(4)
    }
}

/// Plans `program`'s memory.
pub fn plan(program: &Program) -> MemoryPlan {
    let nt = program.tensors.len();
    let storage = |t: TensorId| program.tensors[t].storage;
    // Live range per storage root: [first write, last access].
    let mut first = vec![usize::MAX; nt];
    let mut last = vec![0usize; nt];
    let mut used = vec![false; nt];
    let input = storage(program.input);
    first[input] = 0;
    used[input] = true;
    for (i, ins) in program.instrs.iter().enumerate() {
        for t in ins.writes().into_iter().chain(ins.reads()) {
            let s = storage(t);
            used[s] = true;
            first[s] = first[s].min(i);
            last[s] = last[s].max(i);
        }
    }
    let mut slot_len: Vec<usize> = vec![];
    let mut slot_of_storage = vec![usize::MAX; nt];
    let mut free: Vec<usize> = vec![];
    let mut release_at: Vec<Vec<usize>> = vec![vec![]; program.instrs.len().max(1)];
    let take = |len: usize, slot_len: &mut Vec<usize>, free: &mut Vec<usize>| -> usize {
        // Best fit among free slots big enough; else grow the largest free one; else a new slot.
        let fit = free
            .iter()
            .enumerate()
            .filter(|(_, s)| slot_len[**s] >= len)
            .min_by_key(|(_, s)| slot_len[**s])
            .map(|(i, _)| i);
        let pick = fit.or_else(|| free.iter().enumerate().max_by_key(|(_, s)| slot_len[**s]).map(|(i, _)| i));
        match pick {
            Some(i) => {
                let s = free.swap_remove(i);
                slot_len[s] = slot_len[s].max(len);
                s
            }
            None => {
                slot_len.push(len);
                slot_len.len() - 1
            }
        }
    };
    // The input is written before the program starts.
    let s = take(program.tensors[input].len, &mut slot_len, &mut free);
    slot_of_storage[input] = s;
    release_at[last[input]].push(s);
    let mut by_first: Vec<Vec<usize>> = vec![vec![]; program.instrs.len().max(1)];
    for st in 0..nt {
        if used[st] && st == storage(st) && st != input {
            by_first[first[st]].push(st);
        }
    }
    for i in 0..program.instrs.len() {
        for &st in &by_first[i] {
            let s = take(program.tensors[st].len, &mut slot_len, &mut free);
            slot_of_storage[st] = s;
            release_at[last[st]].push(s);
        }
        free.append(&mut release_at[i]);
    }
    let slot_of: Vec<usize> = (0..nt).map(|t| slot_of_storage[storage(t)]).collect();
    let unplanned_len =
        (0..nt).filter(|&t| used[t] && t == storage(t)).fold(0usize, |a, t| a.saturating_add(program.tensors[t].len));
    MemoryPlan { slot_len, slot_of, unplanned_len }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::ModelKind;
    use crate::program::{Mode, lower};
    use crossbow_tensor::Shape;

    /// No instruction writes a slot that holds a tensor still to be read later (other than
    /// the tensor being overwritten in place), and no instruction reads and writes one slot
    /// except through an alias.
    fn check_plan(p: &Program, plan: &MemoryPlan) {
        // For every instruction i and every tensor t it writes, no other live storage shares
        // t's slot at i.
        let nt = p.tensors.len();
        let st = |t: TensorId| p.tensors[t].storage;
        let mut first = vec![usize::MAX; nt];
        let mut last = vec![0; nt];
        first[st(p.input)] = 0;
        for (i, ins) in p.instrs.iter().enumerate() {
            for t in ins.writes().into_iter().chain(ins.reads()) {
                first[st(t)] = first[st(t)].min(i);
                last[st(t)] = last[st(t)].max(i);
            }
        }
        for a in 0..nt {
            for b in 0..nt {
                let (sa, sb) = (st(a), st(b));
                if sa == sb || first[sa] == usize::MAX || first[sb] == usize::MAX {
                    continue;
                }
                if plan.slot_of[a] == plan.slot_of[b] {
                    let overlap = first[sa] <= last[sb] && first[sb] <= last[sa];
                    assert!(!overlap, "storages {sa} and {sb} overlap in slot {}", plan.slot_of[a]);
                }
            }
            assert!(plan.slot_len[plan.slot_of[a]] >= p.tensors[a].len || first[st(a)] == usize::MAX);
        }
    }

    #[test]
    fn plans_are_valid_and_save_memory() {
        let cifar = Shape::new(vec![3, 32, 32]);
        for (m, shape) in [
            (ModelKind::LeNet5, Shape::new(vec![1, 28, 28])),
            (ModelKind::ResNetCifar(20), cifar.clone()),
            (ModelKind::Vgg16Bn, cifar.clone()),
        ] {
            let g = m.build(&shape, 10).unwrap();
            for mode in [Mode::Train, Mode::Eval] {
                let p = lower(&g, 8, mode).unwrap();
                let plan = plan(&p);
                check_plan(&p, &plan);
                assert!(
                    plan.planned_len() < plan.unplanned_len,
                    "{m} {mode:?}: {} vs {}",
                    plan.planned_len(),
                    plan.unplanned_len
                );
            }
        }
    }
}

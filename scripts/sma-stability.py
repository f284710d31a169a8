#!/usr/bin/env python3
"""Stability of SMA's two forms, linearised on a quadratic f(w) = h/2 w^2 (needs numpy).

Every learner sees the same quadratic and starts equal, so the learners stay equal and the
iteration is linear in the state (w, v, z, z_prev). It is stable while the spectral radius of
its matrix is below 1; this prints the largest lr x curvature (gamma h) that is stable, per k,
for alpha = 1/k, learner momentum 0.9 and central momentum 0.9 (and 0). Momentum SGD with
mu = 0.9 is stable up to 2 (1 + mu) = 3.8.

    python3 scripts/sma-stability.py
"""
import numpy as np
def M(form, k, gh, mu=0.9, muz=0.9):
    a = 1.0/k
    # state x = [w, v, z, zp]; symmetric learners (all w_j equal)
    # c = a (w - z)
    # local: v' = mu v - gh w ; w' = w + v' - c
    # paper: w' = w - gh w - c   (v unused)
    # z' = z + k c + muz (z - zp); zp' = z
    if form == 'local':
        # v' = mu v - gh w
        v_ = np.array([-gh, mu, 0, 0])
        w_ = np.array([1, 0, 0, 0]) + v_ - a*np.array([1, 0, -1, 0])
    else:
        v_ = np.array([0, 0, 0, 0.0])
        w_ = np.array([1-gh, 0, 0, 0]) - a*np.array([1, 0, -1, 0])
    z_ = np.array([0, 0, 1, 0]) + k*a*np.array([1, 0, -1, 0]) + muz*np.array([0, 0, 1, -1])
    zp_ = np.array([0, 0, 1, 0])
    return np.array([w_, v_, z_, zp_], dtype=float)
def maxgh(form, k, **kw):
    hi = None
    for gh in np.arange(0.001, 5, 0.001):  # first unstable gamma h
        r = max(abs(np.linalg.eigvals(M(form, k, gh, **kw))))
        if r >= 1 - 1e-9:
            return gh
    return None
def row(name, form, **kw):
    cells = []
    for k in [1, 2, 4, 8]:
        g = maxgh(form, k, **kw)
        cells.append("unstable" if g is None or g <= 0.0015 else f"{g:.2f}")
    print(f"| {name} | " + " | ".join(cells) + " |")

print("| form | k=1 | k=2 | k=4 | k=8 |")
print("|---|---:|---:|---:|---:|")
row("local momentum, mu_z 0.9", "local")
row("paper, mu_z 0.9", "paper")
row("local momentum, mu_z 0", "local", muz=0.0)
row("paper, mu_z 0", "paper", muz=0.0)

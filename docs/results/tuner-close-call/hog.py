# A noisy neighbour: busy one core for a random 0.2-2 s, then idle a random 0.2-2 s, seeded.
import random, sys, time
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
end = time.time() + float(sys.argv[2] if len(sys.argv) > 2 else 600)
while time.time() < end:
    t = time.time() + rng.uniform(0.2, 2.0)
    while time.time() < t:
        pass
    time.sleep(rng.uniform(0.2, 2.0))

"""torchdiffeq peer of benchmarks/neural_ode.py: same problem, tolerances, initial weights;
dopri5; back-propagation through the solver and odeint_adjoint. float64, 1 thread."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    try:
        import torch
        from torchdiffeq import odeint, odeint_adjoint
    except ImportError:
        print("SKIP torchdiffeq not installed (pip install torchdiffeq)")
        return
    import neural_ode as bench
    import numpy as np

    torch.set_num_threads(1)
    data = torch.from_numpy(bench.truth())
    chain = bench.model()
    p = chain.init_params(seed=0, dtype=np.float64)
    v = chain.params(p)

    class F(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = torch.nn.Linear(2, 50).double()
            self.l2 = torch.nn.Linear(50, 2).double()
            with torch.no_grad():
                self.l1.weight.copy_(torch.from_numpy(v[1]["W"]))
                self.l1.bias.copy_(torch.from_numpy(v[1]["b"]))
                self.l2.weight.copy_(torch.from_numpy(v[2]["W"]))
                self.l2.bias.copy_(torch.from_numpy(v[2]["b"]))

        def forward(self, t, u):
            return self.l2(torch.tanh(self.l1(u**3)))

    f = F()
    ts = torch.from_numpy(bench.SAVEAT)
    y0 = torch.from_numpy(bench.U0)
    for name, solve in (("backprop through dopri5", odeint), ("odeint_adjoint", odeint_adjoint)):
        runs = []
        for _ in range(30):
            t0 = time.perf_counter()
            f.zero_grad()
            ys = solve(f, y0, ts, rtol=bench.RTOL, atol=bench.ATOL, method="dopri5")
            loss = ((ys - data) ** 2).sum()
            loss.backward()
            runs.append(time.perf_counter() - t0)
        print(
            f"torchdiffeq {name} float64 (1 thread): {np.median(runs[5:]) * 1e3:.2f} ms per "
            "loss + gradient"
        )


if __name__ == "__main__":
    main()

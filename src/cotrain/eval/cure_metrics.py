"""CURE's ground-truth monitors as pure functions of execution matrices (`rl.cure.Matrix`): codes that
pass every hidden test, the code Best-of-N by generated tests picks, and how right and how
discriminating the generated tests are."""
from __future__ import annotations

from cotrain.rl.cure import Matrix, best_of_n


def matrix_metrics(matrices: list[Matrix], prefix: str = "") -> dict[str, float]:
    """Ground-truth monitors of a batch of matrices: codes passing every ground-truth test, the code
    Best-of-N by generated tests picks, generated tests the reference solution passes (unit-test
    accuracy), and the share of wrong codes those right tests reject (discrimination)."""
    codes = [all(row) for m in matrices for row in m.gt if row]
    bon = [all(m.gt[best_of_n(m.gen)]) for m in matrices if m.gt and m.gt[0]]
    parsable = [p for m in matrices for p in m.parsable]
    right = [r for m in matrices for r, p in zip(m.reference_gen, m.parsable) if p]
    rejected = []
    for m in matrices:
        wrong = [i for i, row in enumerate(m.gt) if row and not all(row)]
        for j, (r, p) in enumerate(zip(m.reference_gen, m.parsable)):
            if p and r and wrong:
                rejected.append(sum(not m.gen[i][j] for i in wrong) / len(wrong))

    def mean(xs):
        return sum(map(float, xs)) / len(xs) if xs else 0.0
    return {f"{prefix}code_acc": mean(codes), f"{prefix}bon_acc": mean(bon), f"{prefix}test_parsable": mean(parsable),
            f"{prefix}test_accuracy": mean(right), f"{prefix}test_discrimination": mean(rejected)}

"""The HTTP floors' figure (bench/floors.py): the service's requests/s over the floor's, paired by round."""

from __future__ import annotations

from bench.floors import route_ratio


def test_the_figure_is_the_median_of_each_rounds_ratio_not_the_ratio_of_the_medians() -> None:
    # Round 2 ran while the machine was slower for the floor: ratio of the medians 20 / 20 = 1.0, of the rounds 0.5.
    rounds = {"ours:neighbors": [10.0, 20.0, 30.0], "floor:neighbors": [20.0, 10.0, 60.0]}
    cpu = {f"{s}:neighbors": [{"loop": 100.0 + i, "others": 50.0} for i in range(3)] for s in ("ours", "floor")}
    r = route_ratio("neighbors", rounds, cpu)
    assert r["ratio"] == 0.5 and r["ratio_rounds"] == [0.5, 2.0, 0.5]
    assert r["ours_rps"] == 20.0 and r["floor_rps"] == 20.0  # requests/s over the floor's, not the other way
    assert r["cpu_us_per_request"]["ours"] == {"loop": 101.0, "others": 50.0}

from simulations.plot_schedule import figures


def test_figures_8_to_13_are_written(tmp_path):
    paths = figures(tmp_path)
    assert len(paths) == 7
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 10_000

"""The Explore page's chance column: one number format for every row."""

from posbench.app.views.explore import _chance_pct


def test_chance_percentages_share_one_plain_format():
    """Item 6: the chance column mixed "8e-08" and "50.0"; every value is now a plain decimal percentage, small
    ones to at most two significant digits."""
    assert _chance_pct(0.5) == "50.0"
    assert _chance_pct(8e-10) == "0.00000008" and _chance_pct(3.04e-6) == "0.0003"
    assert _chance_pct(0.0123) == "1.2"
    assert _chance_pct(None) == "n/a"
    assert all("e" not in _chance_pct(x) for x in (1e-12, 3e-7, 2e-4, 0.04))

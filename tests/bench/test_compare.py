"""bench.compare's report: medians of the repeats, the ratios the issue asks for, the notes."""
import pytest

from bench.compare import Report, build_parser, format_report


def report_of(**runs):
    report = Report()
    names = {"1": "naive", "2": "offline", "3": "server", "2b": "offline", "3b": "server"}
    for key, values in runs.items():
        key = key.removeprefix("r")
        report.path(key, names[key], "bfloat16" if key.endswith("b") else "float32"
                    ).runs.extend(values)
    return report


def test_rows_show_the_median_and_every_run():
    text = format_report(report_of(r1=[1.0, 3.0, 2.0], r2=[4.0, 4.0, 5.0], r3=[3.0, 3.8, 4.0]))
    assert "| 1 | naive | float32 | 2.00 | 1.00, 3.00, 2.00 |" in text
    assert "| 3 | server | float32 | 3.80 | 3.00, 3.80, 4.00 |" in text


@pytest.mark.parametrize("line", [
    "server / naive (float32 vs float32): 1.90x",
    "server / offline (float32 vs float32): 0.95x",
    "offline / naive (float32 vs float32): 2.00x",
    "server / naive (bfloat16 vs float32): 3.00x",
    "server / offline (bfloat16 vs bfloat16): 0.60x",
], ids=["server-naive", "server-offline", "offline-naive", "bf16-server-naive",
        "bf16-server-offline"])
def test_ratios_are_of_medians(line):
    report = report_of(r1=[2.0], r2=[4.0], r3=[3.8], r2b=[10.0], r3b=[6.0])
    assert f"- {line}" in format_report(report)


def test_ratios_of_missing_rows_are_left_out():
    text = format_report(report_of(r2=[4.0], r3=[3.8]))
    assert "server / offline (float32 vs float32): 0.95x" in text
    assert "naive" not in text.split("\n\n")[1]


def test_notes_are_listed():
    report = report_of(r1=[1.0])
    report.notes.append("peak RSS: 1 MiB")
    assert "- peak RSS: 1 MiB" in format_report(report)


def test_defaults_are_the_issue_figure_and_fit_five_minutes():
    args = build_parser().parse_args([])
    assert (args.dtype, args.other_dtype, args.repeats) == ("float32", "auto", 3)


def test_auto_other_dtype_is_bfloat16_only_where_it_is_native(monkeypatch):
    import bench.compare as compare
    for native, expected in ((True, "bfloat16"), (False, "none")):
        monkeypatch.setattr(compare, "cpu_has_native_bf16", lambda native=native: native)
        assert compare.other_dtype("auto") == expected
    assert compare.other_dtype("float32") == "float32"


def test_tokens_table_and_mixed_to_uniform_ratio():
    from bench.compare import ServerRun
    from bench.summary import LoadPeaks

    report = Report()
    for tokens, padding in ((400.0, 0.0), (420.0, 0.0), (380.0, 0.0)):
        report.add_tokens("uniform", ServerRun(2.0, tokens, padding, LoadPeaks()))
    for tokens, padding in ((340.0, 0.04), (360.0, 0.03), (350.0, 0.05)):
        report.add_tokens("mixed", ServerRun(1.9, tokens, padding, LoadPeaks()))
    text = format_report(report)
    assert "| uniform | 400 | 400, 420, 380 | 0.0% | 2.00 |" in text
    assert "| mixed | 350 | 340, 360, 350 | 4.0% | 1.90 |" in text
    assert "- mixed / uniform real tokens/s: 0.88" in text

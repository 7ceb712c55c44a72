"""bench.compare's report: medians of the repeats, the ratios the issue asks for, the notes."""
import pytest

from bench.ceiling import Ceiling
from bench.compare import Report, build_parser, format_report


def report_of(**runs):
    report = Report()
    names = {"1": "naive", "2": "offline", "3": "server", "2b": "offline", "3b": "server",
             "P": "plain", "Pb": "plain", "Pc": "plain compiled", "Pcb": "plain compiled"}
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
    assert args.plain_compile == "freeze"  # the fastest plain forward torch reaches: the stretch bar


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


def test_ceiling_table_gives_each_path_its_fraction_and_the_server_plain_ratio():
    report = report_of(rP=[10.0], rPc=[11.0], r2=[20.0], r3=[18.0], rPb=[12.9], r2b=[25.0], r3b=[22.0])
    report.ceilings[""] = [Ceiling("float32", 300.0, 2e8, 192.0), Ceiling("float32", 400.0, 2e8, 192.0)]
    report.ceilings["b"] = [Ceiling("bfloat16", 3000.0, 2 * 106e6, 192.0)]
    report.tokens_per_item.update({"P": 300, "3": 192, "Pb": 300, "3b": 192.5})
    text = format_report(report)
    # float32: the best of the repeats' matmuls (400 GFLOP/s) -> 10.4 items/s
    assert "| float32 | 400 | 10.4 | 0.96 | 1.06 | 1.92 | 1.73 | 1.80x | 300 / 192 |" in text
    assert "| bfloat16 | 3000 | 73.7 | 0.18 | - | 0.34 | 0.30 | 1.71x | 300 / 192 |" in text
    assert "server / plain batched (bfloat16 vs bfloat16): 1.71x" in text
    assert "server / plain compiled (float32 vs float32): 1.64x" in text
    assert "plain compiled / plain batched (float32 vs float32): 1.10x" in text

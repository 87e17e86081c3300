"""scripts/perf_table.py on a committed sample of `flashattn bench --json --rounds 3` output (a machine line,
forward, decode and backward rows and their summaries): one table per mode and CPU kind, medians over the
rounds that agree with the bench's own summaries, the document rewritten between its markers only."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "perf_table.py")
SAMPLE = os.path.join(HERE, "sample.jsonl")
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import perf_results  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def summaries():
    with open(SAMPLE, encoding="utf-8") as f:
        return {row["name"]: row for row in map(json.loads, f) if row.get("summary")}


def table_rows(text, heading):
    """The data rows of the table under `heading`, as lists of cells."""
    lines = text.splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("| ") and not line.startswith("| case") and not line.startswith("| ---"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


class PerfTable(unittest.TestCase):
    def setUp(self):
        result = run("--stdout", SAMPLE)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.text = result.stdout

    def test_one_table_per_mode_and_cpu(self):
        for mode in ("Forward", "Decode", "Backward"):
            self.assertEqual(self.text.count(f"#### {mode}, Zen 5"), 1, mode)
        self.assertIn("### Zen 5 (AMD EPYC, family 26 model 2, 2 CPUs)", self.text)
        self.assertTrue(self.text.startswith("<!-- perf-table:begin -->"))

    def test_medians_are_those_of_the_bench_summaries(self):
        by_name = summaries()
        forward = table_rows(self.text, "#### Forward, Zen 5")
        self.assertEqual([row[0] for row in forward], ["b1 h8 N512 d128 f32", "b1 h8 N512 d128 f32 causal"])
        self.assertEqual(forward[0][3], "3")  # rounds
        self.assertEqual(forward[0][4], f"{by_name['forward_default_f32_b1_h8_hkv8_nq512_nk512_d128']['median_ms']:.2f}")
        self.assertTrue(forward[0][-1].endswith("×"))  # the baseline's speedup
        decode = table_rows(self.text, "#### Decode, Zen 5")
        self.assertEqual(len(decode), 2)
        for row, name in zip(decode, ("decode_default_f16_b1_h32_hkv8_nq1_nk4096_d128",
                                      "decode_default_f16_b1_h32_hkv8_nq1_nk4096_d128_cache_int8_quantize_query"
                                      "_quantize_probs")):
            fraction = by_name[name]["median_roofline_fraction"]
            self.assertTrue(row[9].startswith(f"{100 * fraction:.0f}% ("), (row[9], fraction))
        self.assertIn("integer scores + P̃V", decode[1][0])
        self.assertEqual(len(table_rows(self.text, "#### Backward, Zen 5")), 1)

    def test_the_document_changes_between_the_markers_only(self):
        with tempfile.TemporaryDirectory() as work:
            doc = os.path.join(work, "doc.md")
            before, after = "# Title\n\ntext before\n\n", "\n\ntext after\n"
            with open(doc, "w", encoding="utf-8") as f:
                f.write(before + "<!-- perf-table:begin -->\nold\n<!-- perf-table:end -->" + after)
            for _ in range(2):  # the second run finds nothing to change
                result = run("--doc", doc, SAMPLE)
                self.assertEqual(result.returncode, 0, result.stderr)
                with open(doc, encoding="utf-8") as f:
                    text = f.read()
                self.assertTrue(text.startswith(before) and text.endswith(after))
                self.assertNotIn("\nold\n", text)
                self.assertIn("#### Decode, Zen 5", text)
            self.assertIn("unchanged", result.stdout)
            with open(doc, "w", encoding="utf-8") as f:
                f.write("no markers\n")
            self.assertNotEqual(run("--doc", doc, SAMPLE).returncode, 0)

    def test_rows_without_a_machine_line_take_the_given_cpu(self):
        with tempfile.TemporaryDirectory() as work:
            rows = os.path.join(work, "rows.jsonl")
            with open(SAMPLE, encoding="utf-8") as f, open(rows, "w", encoding="utf-8") as out:
                out.writelines(line for line in f if '"machine"' not in line)
            result = run("--stdout", "--cpu", "Zen 9", rows)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("#### Forward, Zen 9", result.stdout)


class CpuKind(unittest.TestCase):
    def test_kinds(self):
        self.assertEqual(perf_results.cpu_kind("AuthenticAMD", 25, 1), "Zen 3")
        self.assertEqual(perf_results.cpu_kind("AuthenticAMD", 25, 0x11), "Zen 4")
        self.assertEqual(perf_results.cpu_kind("AuthenticAMD", 26, 2), "Zen 5")
        self.assertEqual(perf_results.cpu_kind("GenuineIntel", 6, 207), "Emerald Rapids")
        self.assertEqual(perf_results.cpu_kind("GenuineIntel", 6, 1), "GenuineIntel family 6 model 1")
        self.assertEqual(perf_results.slug("Emerald Rapids"), "emeraldrapids")


if __name__ == "__main__":
    unittest.main()

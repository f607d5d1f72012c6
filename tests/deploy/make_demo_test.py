"""deploy/demo: tensormorph-make-demo's command line. --help is usage on
stdout (exit 0); an option it does not know is refused (exit 1) and never
becomes a directory of that name; a directory that starts with '-' follows
"--"."""

import os
import subprocess
import tempfile
import unittest

MAKE_DEMO = os.environ["TENSORMORPH_MAKE_DEMO"]


def run(args, cwd):
    return subprocess.run([MAKE_DEMO] + args, cwd=cwd, capture_output=True,
                          text=True)


class MakeDemoCommandLineTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.cwd = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_help_is_usage_on_stdout_and_writes_nothing(self):
        for flag in ["--help", "-h"]:
            with self.subTest(flag=flag):
                r = run([flag], self.cwd)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("usage:", r.stdout)
                self.assertIn("DIR", r.stdout)
                self.assertEqual(os.listdir(self.cwd), [])

    def test_an_unknown_option_is_refused_not_made_a_directory(self):
        for flag in ["--halp", "-x", "--out=demo"]:
            with self.subTest(flag=flag):
                r = run([flag], self.cwd)
                self.assertEqual(r.returncode, 1)
                self.assertIn(f"unknown option '{flag}'", r.stderr)
                self.assertIn("usage:", r.stderr)
                self.assertEqual(os.listdir(self.cwd), [])

    def test_no_directory_or_two_are_usage_errors(self):
        for args in [[], ["a", "b"], ["--"]]:
            with self.subTest(args=args):
                r = run(args, self.cwd)
                self.assertEqual(r.returncode, 1)
                self.assertIn("usage:", r.stderr)
                self.assertEqual(os.listdir(self.cwd), [])

    def test_a_directory_after_double_dash_may_start_with_a_dash(self):
        r = run(["--", "-demo"], self.cwd)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("imatrix.dat", os.listdir(os.path.join(self.cwd, "-demo")))


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/env python3
"""The two layout scripts on small made-up trees: what each must catch and
what it must let through (run by ctest as layout_scripts)."""

import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402
import function_lengths  # noqa: E402


def write_tree(root, files):
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)


def run_layers(files):
    with tempfile.TemporaryDirectory() as root:
        write_tree(root, files)
        failures = []
        paths = sorted(files)
        check_layers.check_includes(root, paths, failures)
        check_layers.check_links(root, paths, failures)
        return failures


class CheckLayersTest(unittest.TestCase):
    def test_downward_includes_pass(self):
        self.assertEqual(run_layers({
            "core/a.h": "",
            "core/diff_parts/p.h": "",
            "proto/status_mapping.h": "",
            "server/s.cc": '#include "core/a.h"\n#include "proto/status_mapping.h"\n',
            "client/c.cc": '#include "core/diff_parts/p.h"\n'
                           '#include "tensormorph/v1/tensormorph.pb.h"\n',
            "tests/t.cc": '#include "server/s.cc"\n',
        }), [])

    def test_upward_include_names_file_line_and_rule(self):
        failures = run_layers({
            "core/a.cc": '// one\n#include "server/s.h"\n',
            "server/s.h": "",
        })
        self.assertEqual(len(failures), 1)
        self.assertTrue(failures[0].startswith("core/a.cc:2: core/ may not include"))

    def test_client_library_may_not_reach_core_or_embedded(self):
        failures = run_layers({
            "core/slice.h": "",
            "client/embedded/e.h": "",
            "client/c.cc": '#include "core/slice.h"\n#include "client/embedded/e.h"\n',
        })
        self.assertEqual([f.split(":")[1] for f in failures], ["1", "2"])

    def test_server_may_not_include_its_http_port(self):
        failures = run_layers({"server/http/g.h": "",
                               "server/s.cc": '#include "server/http/g.h"\n'})
        self.assertEqual(len(failures), 1)

    def test_core_may_not_include_grpc(self):
        failures = run_layers({"core/a.cc": "#include <grpcpp/grpcpp.h>\n"})
        self.assertEqual(len(failures), 1)

    def test_nothing_outside_tests_includes_tests(self):
        failures = run_layers({"tests/support/w.h": "",
                               "server/s.cc": '#include "tests/support/w.h"\n'})
        self.assertEqual(len(failures), 1)

    def test_stale_include_fails(self):
        failures = run_layers({"server/s.cc": '#include "client/gateway/x.h"\n'})
        self.assertIn("no file of the tree", failures[0])

    def test_link_against_a_higher_layer_fails(self):
        failures = run_layers({"client/CMakeLists.txt":
                               "target_link_libraries(tensormorph_client\n"
                               "  PUBLIC Tensormorph::proto Tensormorph::server)\n"})
        self.assertEqual(len(failures), 1)
        self.assertIn("tensormorph_client (client/) may not link tensormorph_server",
                      failures[0])


def lengths(code):
    return {name: last - first + 1
            for name, first, last in function_lengths.scan(code)}


class FunctionLengthsTest(unittest.TestCase):
    def test_counts_signature_to_closing_brace(self):
        self.assertEqual(lengths("int F(int x)\n{\n  return x;\n}\n"), {"F": 4})

    def test_braces_in_literals_and_comments_do_not_count(self):
        code = ('void F() {\n'
                '  const char* s = "}}";  // }\n'
                '  auto r = R"x(})x";\n'
                '  char c = \'}\'; /* } */ int n = 1\'000;\n'
                '}\n'
                'void G() {}\n')
        self.assertEqual(lengths(code), {"F": 5, "G": 1})

    def test_lambdas_belong_to_their_function(self):
        code = "void F() {\n  auto l = [&](int a) {\n    return a;\n  };\n}\n"
        self.assertEqual(lengths(code), {"F": 5})

    def test_classes_namespaces_initializers_and_constructors(self):
        code = ("namespace a {\n"
                "enum class E { kA, kB };\n"
                "constexpr int kT[] = {1, 2};\n"
                "struct S : B {\n"
                "  S(int x) : x_{x}, y_(x) {\n"
                "  }\n"
                "  int Get() const override { return x_; }\n"
                "  int x_, y_;\n"
                "};\n"
                "}  // namespace a\n")
        self.assertEqual(lengths(code), {"S::S": 2, "S::Get": 1})

    def test_attributes_and_test_macros_are_named(self):
        code = ('__attribute__((target("avx2"))) void Fast(\n'
                "    int n) {\n}\n"
                "TEST(Suite, Name) {\n}\n")
        self.assertEqual(lengths(code), {"Fast": 3, "TEST(Suite, Name)": 2})

    def test_allowlist_entries_are_checked(self):
        with tempfile.TemporaryDirectory() as root:
            body = "void Long() {\n" + "  x();\n" * 130 + "}\n"
            write_tree(root, {"core/a.cc": body, "allow.txt": ""})
            run = lambda: subprocess.run(
                [sys.executable, function_lengths.__file__, root, "--allowlist",
                 os.path.join(root, "allow.txt")], capture_output=True, text=True)
            out = run()
            self.assertEqual(out.returncode, 1, out.stdout)
            self.assertIn("core/a.cc:1: Long is 132 lines", out.stdout)
            write_tree(root, {"allow.txt": "core/a.cc Long parser: a test\n"})
            self.assertEqual(run().returncode, 0)
            write_tree(root, {"core/a.cc": "void Long() {}\n"})
            out = run()
            self.assertEqual(out.returncode, 1)
            self.assertIn("no longer over 120 lines", out.stdout)


if __name__ == "__main__":
    unittest.main()

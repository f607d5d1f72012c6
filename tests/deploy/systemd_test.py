"""deploy/systemd/tensormorphd.service: `systemd-analyze verify` accepts it
(pointed at the built server), its hardening is all there, the command line
it runs with its default settings starts the built server, and systemd waits
longer than the server's drain before it kills it."""

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

import deploy_support as ds

UNIT = ds.read("deploy", "systemd", "tensormorphd.service")
DEFAULTS = ds.read("deploy", "systemd", "tensormorphd.default")
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def directives(text):
    """[(key, value)] of the unit's [Service] section, in order."""
    out = []
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            out.append((key, value))
    return out


def values(key):
    return [v for k, v in directives(UNIT) if k == key]


def one(key):
    found = values(key)
    if len(found) != 1:
        raise AssertionError(f"{key}= appears {len(found)} times")
    return found[0]


def environment():
    """The unit's Environment= settings (what runs without
    /etc/default/tensormorphd)."""
    env = {}
    for value in values("Environment"):
        for assignment in shlex.split(value):
            name, _, setting = assignment.partition("=")
            env[name] = setting
    return env


def exec_start_argv(env):
    """ExecStart expanded as systemd does: ${X} is one word, $X is split on
    whitespace."""
    words = []
    for word in one("ExecStart").split():
        m = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", word)
        if m and m.group(1):
            words.append(env[m.group(1)])
        elif m:
            words += env[m.group(2)].split()
        else:
            words.append(word)
    return words


class Unit(unittest.TestCase):

    def test_the_hardening_directives_are_set(self):
        want = {
            "NoNewPrivileges": "yes",
            "ProtectSystem": "strict",
            "ProtectHome": "yes",
            "PrivateTmp": "yes",
            "CapabilityBoundingSet": "",
            "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
            "MemoryDenyWriteExecute": "yes",
            "Restart": "on-failure",
            "KillSignal": "SIGTERM",
        }
        for key, value in want.items():
            self.assertEqual(one(key), value, key)
        self.assertIn("@system-service", values("SystemCallFilter"))
        user = values("DynamicUser") == ["yes"] or values("User") == [
            "tensormorph"]
        self.assertTrue(user, "DynamicUser=yes or User=tensormorph")

    def test_every_root_is_read_only(self):
        env = environment()
        roots = ds.flag_values(exec_start_argv(env), "--root")
        self.assertTrue(roots)
        # "-" makes a path optional: a box serving other roots still starts.
        read_only = [p.lstrip("-")
                     for p in " ".join(values("ReadOnlyPaths")).split()]
        for root in roots:
            self.assertIn(root, read_only)

    def test_the_defaults_file_sets_the_same_settings_and_is_optional(self):
        self.assertIn("-/etc/default/tensormorphd", values("EnvironmentFile"))
        in_file = {line.split("=", 1)[0] for line in DEFAULTS.splitlines()
                   if re.match(r"^\w+=", line)}
        self.assertEqual(in_file, set(environment()))
        self.assertEqual(
            {k: v for k, v in (shlex.split(line)[0].split("=", 1)
                               for line in DEFAULTS.splitlines()
                               if re.match(r"^\w+=", line))},
            environment(), "the file's defaults are the unit's")

    def test_systemd_waits_longer_than_the_drain(self):
        argv = exec_start_argv(environment())
        grace = float(ds.flag_values(argv, "--shutdown-grace")[0])
        self.assertGreater(float(one("TimeoutStopSec")), grace)

    def test_reload_sends_the_signal_that_rereads_the_tokens(self):
        self.assertEqual(one("ExecReload"), "/bin/kill -HUP $MAINPID")
        help_text = subprocess.run([ds.TENSORMORPHD, "--help"],
                                   capture_output=True, text=True).stdout
        self.assertIn("SIGHUP reloads the file", help_text)

    def test_every_flag_exists_and_the_server_starts_with_them(self):
        env = environment()
        env["TENSORMORPHD_ARGS"] = re.search(
            r'^#TENSORMORPHD_ARGS="(.*)"$', DEFAULTS, re.M).group(1)
        argv = exec_start_argv(env)
        self.assertEqual(argv[0], "/usr/local/bin/tensormorphd")
        for flag in ds.flags_of(argv[1:]):
            self.assertIn(flag, ds.server_options())
        # The example's token file, made here.
        tokens = tempfile.NamedTemporaryFile("w", suffix=".tokens")
        tokens.write("t0ken\n")
        tokens.flush()
        args = [tokens.name if a.endswith("/tokens") else a for a in argv[1:]]
        server = ds.RunningServer(args)
        try:
            r = subprocess.run([ds.CLI, "health", "--server", server.address],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        finally:
            server.stop()
            tokens.close()

    @unittest.skipIf(SYSTEMD_ANALYZE is None, "no systemd-analyze here")
    def test_systemd_analyze_verify_says_nothing_about_the_unit(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tensormorphd.service")
            with open(path, "w") as f:
                f.write(UNIT.replace("/usr/local/bin/tensormorphd",
                                     os.path.abspath(ds.TENSORMORPHD)))
            r = subprocess.run([SYSTEMD_ANALYZE, "verify", path],
                               capture_output=True, text=True)
            said = [line for line in (r.stdout + r.stderr).splitlines()
                    if "tensormorphd" in line]
            self.assertEqual(said, [])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    @unittest.skipIf(SYSTEMD_ANALYZE is None, "no systemd-analyze here")
    def test_systemd_rates_the_exposure_low(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tensormorphd.service")
            with open(path, "w") as f:
                f.write(UNIT)
            r = subprocess.run([SYSTEMD_ANALYZE, "security", "--offline=yes",
                                path], capture_output=True, text=True)
            m = re.search(r"Overall exposure level for \S+: ([\d.]+)",
                          r.stdout)
            if r.returncode != 0 and m is None:
                self.skipTest("this systemd-analyze has no offline security "
                              f"check: {r.stderr.strip()}")
            self.assertIsNotNone(m, r.stdout)
            # 0 is locked down, 10 is unprotected; 2.0 and below is "OK".
            self.assertLessEqual(float(m.group(1)), 2.0, r.stdout)


if __name__ == "__main__":
    unittest.main()

"""deploy/Dockerfile, read statically (no docker daemon is needed): Debian
bookworm stages built by the scripts tests/run.sh runs, a non-root runtime
user, a HEALTHCHECK through `tensormorph health` on the port the server
listens on and the image exposes, and a runtime stage whose packages hold
every shared library the built binaries load. The ENTRYPOINT's command line
is run against the built server. Where a docker daemon answers and
TENSORMORPH_DOCKER_BUILD=1, the image is also built and its health checked."""

import os
import re
import shutil
import subprocess
import time
import unittest

import deploy_support as ds


def install_deps_list(mode):
    """The PACKAGES=( ... ) list deploy/install_deps.sh installs in `mode`."""
    text = ds.read("deploy", "install_deps.sh")
    start = text.index(f"  {mode})")
    block = text[start:text.index(";;", start)]
    body = block[block.index("PACKAGES=(") + len("PACKAGES=("):]
    body = body[:body.index(")")]
    return [w for line in body.splitlines()
            for w in line.split("#", 1)[0].split()]


class Dockerfile(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.df = ds.Dockerfile(ds.read("deploy", "Dockerfile"))
        cls.runtime = cls.df.last_stage()

    def entrypoint(self):
        return ds.exec_form(self.df.all("ENTRYPOINT")[-1])

    def test_every_stage_is_debian_bookworm(self):
        froms = self.df.all("FROM")
        self.assertGreaterEqual(len(froms), 2, "a build and a runtime stage")
        for f in froms:
            self.assertRegex(f.split()[0], r"^debian:bookworm(-slim)?$")
        self.assertEqual(froms[-1].split()[0], "debian:bookworm-slim")

    def test_the_runtime_user_is_not_root(self):
        users = self.df.all("USER", self.runtime)
        self.assertEqual(len(users), 1)
        uid, _, gid = users[0].partition(":")
        self.assertTrue(uid.isdigit(), "a numeric uid, so runAsNonRoot can "
                        "tell it is not root")
        self.assertNotEqual(int(uid), 0)
        self.assertNotEqual(int(gid or uid), 0)
        self.assertTrue(any(f"--uid {uid}" in r
                            for r in self.df.all("RUN", self.runtime)),
                        "the user is created with that uid")

    def test_the_healthcheck_asks_the_exposed_listen_port(self):
        checks = self.df.all("HEALTHCHECK")
        self.assertEqual(len(checks), 1)
        m = re.search(r"CMD (\[.*\])", checks[0])
        self.assertIsNotNone(m, "exec form: no shell in the image's check")
        argv = ds.exec_form(m.group(1))
        self.assertEqual(argv[:2], ["tensormorph", "health"])
        target = ds.flag_values(argv, "--server")[0]
        listen = ds.flag_values(self.entrypoint(), "--listen")[0]
        self.assertEqual(ds.port_of(target), ds.port_of(listen))
        exposed = {int(p.split("/")[0]) for e in self.df.all("EXPOSE")
                   for p in e.split()}
        self.assertIn(ds.port_of(listen), exposed)
        http = ds.flag_values(ds.exec_form(self.df.all("CMD")[-1]),
                              "--http-listen")
        for address in http:
            self.assertIn(ds.port_of(address), exposed)
        for flag in ds.flags_of(argv[2:]):
            self.assertIn(flag, {**ds.cli_options(),
                                 **ds.cli_options("health")})

    def test_the_build_runs_the_scripts_tests_run_sh_runs(self):
        build_runs = " ".join(self.df.all("RUN", 0))
        self.assertRegex(build_runs, r"deploy/install_deps\.sh(\s|&|$)")
        self.assertIn("deploy/build.sh", build_runs)
        run_sh = ds.read("tests", "run.sh")
        self.assertRegex(run_sh, r"\ndeploy/install_deps\.sh --tests\n")
        self.assertRegex(run_sh, r"\$\(deploy/build\.sh ")
        self.assertNotIn("cmake -S", run_sh,
                         "tests/run.sh configures through deploy/build.sh only")
        runtime_runs = " ".join(self.df.all("RUN", self.runtime))
        self.assertIn("install_deps.sh --runtime", runtime_runs)

    def test_the_runtime_stage_copies_the_installed_binaries(self):
        build_runs = " ".join(self.df.all("RUN", 0))
        prefix = re.search(r"cmake --install build --prefix (\S+)",
                           build_runs).group(1)
        copies = [c for c in self.df.all("COPY", self.runtime)
                  if c.startswith("--from=build")]
        self.assertEqual(len(copies), 1)
        sources = copies[0].split()[1:-1]
        self.assertEqual(sorted(sources),
                         sorted(f"{prefix}/bin/{b}"
                                for b in ("tensormorph", "tensormorphd")))

    def test_the_entrypoint_serves_models_on_all_interfaces(self):
        argv = self.entrypoint()
        self.assertEqual(argv[0], "tensormorphd")
        self.assertEqual(ds.flag_values(argv, "--root"), ["/models"])
        self.assertTrue(ds.flag_values(argv, "--listen")[0].startswith(
            "0.0.0.0:"))
        for flag in ds.flags_of(argv[1:] +
                                ds.exec_form(self.df.all("CMD")[-1])):
            self.assertIn(flag, ds.server_options())

    def test_the_server_accepts_the_entrypoint_and_the_healthcheck_passes(self):
        argv = self.entrypoint()[1:] + ds.exec_form(self.df.all("CMD")[-1])
        server = ds.RunningServer(argv)
        try:
            check = ds.exec_form(re.search(r"CMD (\[.*\])",
                                           self.df.all("HEALTHCHECK")[0])
                                 .group(1))
            check = [ds.CLI] + [server.address if a.startswith("127.0.0.1:")
                                else a for a in check[1:]]
            r = subprocess.run(check, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        finally:
            server.stop()

    def test_dockerignore_keeps_build_trees_out(self):
        ignored = ds.read(".dockerignore").split()
        for pattern in ("build", "build-*", ".git"):
            self.assertIn(pattern, ignored)

    @unittest.skipUnless(shutil.which("dpkg") and
                         "VERSION_CODENAME=bookworm" in
                         open("/etc/os-release").read(),
                         "the runtime package names are bookworm's; this "
                         "host is another release")
    def test_the_runtime_packages_hold_every_library_the_binaries_load(self):
        # bookworm-slim has these already (apt needs them).
        packages = set(install_deps_list("--runtime")) | {
            "libc6", "libgcc-s1", "libstdc++6"}
        loaded = {}  # library path -> the binary loading it
        for binary in (ds.TENSORMORPHD, ds.CLI):
            ldd = subprocess.run(["ldd", binary], capture_output=True,
                                 text=True, check=True).stdout
            if re.search(r"lib(a|ub|t)san", ldd):
                self.skipTest("a sanitizer build: the image's is not one")
            for path in re.findall(r"=> (/\S+)", ldd):
                loaded[path] = os.path.basename(binary)
        # One dpkg -S for all (it is slow to start); merged /usr means a
        # library's path may be listed with or without /usr.
        candidates = {c: path for path in loaded
                      for c in (path, os.path.realpath(path), "/usr" + path)}
        out = subprocess.run(["dpkg", "-S"] + sorted(candidates),
                             capture_output=True, text=True).stdout
        owners = {}
        for line in out.splitlines():
            package, _, listed = line.partition(": ")
            if listed in candidates:
                owners[candidates[listed]] = package.split(":")[0]
        self.assertTrue(owners, "dpkg -S found none of the libraries")
        for path, binary in sorted(loaded.items()):
            self.assertIn(path, owners, f"{binary} loads {path}, which no "
                          "Debian package installed: the image would lack it")
            self.assertIn(owners[path], packages,
                          f"{binary} loads {path}, from {owners[path]}: add "
                          "it to install_deps.sh --runtime")


def docker_works():
    if os.environ.get("TENSORMORPH_DOCKER_BUILD") != "1":
        return False
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@unittest.skipUnless(docker_works(), "set TENSORMORPH_DOCKER_BUILD=1 with a "
                     "docker daemon running to build the image")
class DockerBuild(unittest.TestCase):

    def test_the_image_builds_and_reports_healthy(self):
        tag = ds.Dockerfile(ds.read("deploy", "Dockerfile")).documented_tag()
        subprocess.run(["docker", "build", "-f", ds.source("deploy",
                                                            "Dockerfile"),
                        "-t", tag, ds.SOURCE_DIR], check=True)
        name = "tensormorph-deploy-test"
        subprocess.run(["docker", "run", "-d", "--rm", "--name", name, tag],
                       check=True, capture_output=True)
        try:
            for _ in range(50):  # the server may still be starting
                r = subprocess.run(["docker", "exec", name, "tensormorph",
                                    "health", "--server", "127.0.0.1:7431"],
                                   capture_output=True, text=True)
                if r.returncode == 0:
                    break
                time.sleep(0.2)
            self.assertEqual(r.returncode, 0, r.stderr)
            user = subprocess.run(["docker", "exec", name, "id", "-u"],
                                  capture_output=True, text=True).stdout
            self.assertNotEqual(user.strip(), "0")
        finally:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)


if __name__ == "__main__":
    unittest.main()

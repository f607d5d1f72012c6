"""deploy/k8s rendered as kubectl renders it (`kubectl kustomize`, Debian's
kubernetes-client or a newer one), and the rendered objects checked against
one another, against deploy/Dockerfile and against what the built binaries
accept: the ports a server listens on are the ones its container, probes and
Service name; its roots are its read-only mounts and the image's /models; the
diff Job's parts are the merge Job's inputs."""

import os
import re
import shutil
import subprocess
import unittest

import yaml

import deploy_support as ds

K8S = ds.source("deploy", "k8s")
OVERLAYS = ["serving", "shard-affine", "batch-diff", "batch-diff/merge"]
KUBECTL = shutil.which("kubectl")


def render(overlay):
    """The objects `kubectl kustomize` makes of an overlay."""
    out = subprocess.run([KUBECTL, "kustomize", os.path.join(K8S, "overlays",
                                                              overlay)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize overlays/{overlay} failed: "
                             f"{out.stderr}")
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def find(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and
             (name is None or o["metadata"]["name"] == name)]
    if not found:
        raise AssertionError(f"no {kind} {name or ''} among "
                             f"{[(o['kind'], o['metadata']['name']) for o in objects]}")
    return found


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def server_container(workload):
    """The tensormorphd container of a serving workload, and its argv after
    the program name."""
    for c in pod_spec(workload)["containers"]:
        if c.get("command", [None])[0] == "tensormorphd":
            return c, c.get("args", [])
    raise AssertionError(f"{workload['metadata']['name']}: no container runs "
                         "tensormorphd")


def shell_script(container):
    command = container.get("command", [])
    if command[:2] != ["/bin/sh", "-c"]:
        raise AssertionError(f"container {container['name']}: want "
                             f"/bin/sh -c SCRIPT, got {command}")
    return " ".join(container.get("args", []))


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


@unittest.skipIf(KUBECTL is None,
                 "no kubectl on PATH (deploy/install_deps.sh --tests installs "
                 "Debian's kubernetes-client)")
class Manifests(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.rendered = {o: render(o) for o in OVERLAYS}
        cls.dockerfile = ds.Dockerfile(ds.read("deploy", "Dockerfile"))
        cls.serving = find(cls.rendered["serving"], "Deployment",
                           "tensormorph")[0]
        cls.shards = find(cls.rendered["shard-affine"], "StatefulSet")[0]
        cls.servers = [cls.serving, cls.shards]

    def image_entrypoint(self):
        return ds.exec_form(self.dockerfile.all("ENTRYPOINT")[-1])

    def image_uid(self):
        user = self.dockerfile.all("USER", self.dockerfile.last_stage())[-1]
        return int(user.split(":")[0])

    # --- ports ---------------------------------------------------------

    def test_every_server_listens_where_its_container_probes_and_service_say(self):
        for workload, objects in [(self.serving, self.rendered["serving"]),
                                  (self.shards,
                                   self.rendered["shard-affine"])]:
            name = workload["metadata"]["name"]
            container, args = server_container(workload)
            with self.subTest(workload=name):
                ports = {p["name"]: p["containerPort"]
                         for p in container["ports"]}
                listen = ds.flag_values(args, "--listen")
                self.assertEqual(len(listen), 1, f"{name}: --listen {listen}")
                grpc = ds.port_of(listen[0])
                self.assertTrue(listen[0].startswith("0.0.0.0:"),
                                f"{name}: --listen {listen[0]} is not "
                                "reachable from outside the pod")
                self.assertEqual(ports["grpc"], grpc, name)
                for probe in ("readinessProbe", "livenessProbe"):
                    self.assertEqual(container[probe]["grpc"]["port"], grpc,
                                     f"{name} {probe}")
                http = ds.flag_values(args, "--http-listen")
                if http:
                    self.assertEqual(ports["http"], ds.port_of(http[0]), name)
                labels = workload["spec"]["template"]["metadata"]["labels"]
                services = [s for s in find(objects, "Service")
                            if selects(s["spec"]["selector"], labels)]
                self.assertEqual(len(services), 1,
                                 f"{name}: Services selecting its pods: "
                                 f"{[s['metadata']['name'] for s in services]}")
                service = services[0]
                self.assertEqual(service["spec"].get("clusterIP"), "None",
                                 f"{name}: the Service must be headless so "
                                 "its name resolves to every pod")
                service_ports = {p["name"]: p for p in service["spec"]["ports"]}
                self.assertEqual(service_ports["grpc"]["port"], grpc)
                self.assertEqual(service_ports["grpc"]["targetPort"], grpc)
                if http:
                    self.assertEqual(service_ports["http"]["targetPort"],
                                     ds.port_of(http[0]))

    def test_the_http_port_answers_as_its_services_names(self):
        # Any other Host is refused 421 (DNS rebinding): a Service reached by
        # its name must have that name allowed, and $(VAR) in args must be
        # a variable of the container's env, or Kubernetes passes it as is.
        for workload, objects in [(self.serving, self.rendered["serving"]),
                                  (self.shards,
                                   self.rendered["shard-affine"])]:
            name = workload["metadata"]["name"]
            container, args = server_container(workload)
            if not ds.flag_values(args, "--http-listen"):
                continue
            with self.subTest(workload=name):
                labels = workload["spec"]["template"]["metadata"]["labels"]
                service = [s for s in find(objects, "Service")
                           if selects(s["spec"]["selector"], labels)][0]
                svc = service["metadata"]["name"]
                allowed = ds.flag_values(args, "--http-allow-host")
                self.assertIn(svc, allowed)
                self.assertIn(svc + ".$(POD_NAMESPACE).svc.cluster.local",
                              allowed)
                env = {e["name"] for e in container.get("env", [])}
                for arg in args:
                    for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                          arg):
                        self.assertIn(var, env, f"{name}: {arg}")

    def test_the_listen_port_is_the_one_the_image_listens_on_and_exposes(self):
        entry = self.image_entrypoint()
        grpc = ds.port_of(ds.flag_values(entry, "--listen")[0])
        exposed = {int(p.split("/")[0]) for e in self.dockerfile.all("EXPOSE")
                   for p in e.split()}
        self.assertIn(grpc, exposed)
        for workload in self.servers:
            _, args = server_container(workload)
            self.assertEqual(ds.port_of(ds.flag_values(args, "--listen")[0]),
                             grpc, workload["metadata"]["name"])

    def test_the_services_select_only_their_own_workloads_pods(self):
        all_workloads = self.servers
        for overlay in ("serving", "shard-affine"):
            for service in find(self.rendered[overlay], "Service"):
                chosen = [w["metadata"]["name"] for w in all_workloads
                          if selects(service["spec"]["selector"],
                                     w["spec"]["template"]["metadata"]["labels"])]
                self.assertEqual(len(chosen), 1,
                                 f"Service {service['metadata']['name']} "
                                 f"selects {chosen}")

    # --- serving ---------------------------------------------------------

    def test_serving_runs_several_pods_recycling_connections(self):
        self.assertGreaterEqual(self.serving["spec"]["replicas"], 2)
        _, args = server_container(self.serving)
        age = ds.flag_values(args, "--max-connection-age")
        self.assertEqual(len(age), 1, "--max-connection-age: clients must "
                         "reconnect and re-resolve for new pods to get calls")
        self.assertGreater(int(age[0]), 0)
        self.assertLessEqual(int(age[0]), 3600)

    def test_a_disruption_budget_covers_the_serving_pods(self):
        pdb = find(self.rendered["serving"], "PodDisruptionBudget")[0]
        self.assertTrue(selects(
            pdb["spec"]["selector"]["matchLabels"],
            self.serving["spec"]["template"]["metadata"]["labels"]))
        self.assertLess(pdb["spec"].get("maxUnavailable", 0),
                        self.serving["spec"]["replicas"])

    def test_shard_pods_serve_their_own_volume_with_partial_shards(self):
        spec = self.shards["spec"]
        service = find(self.rendered["shard-affine"], "Service",
                       spec["serviceName"])[0]
        self.assertEqual(service["spec"]["clusterIP"], "None")
        container, args = server_container(self.shards)
        self.assertIn("--partial-shards", args)
        templates = {t["metadata"]["name"] for t in spec["volumeClaimTemplates"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        for root in ds.flag_values(args, "--root"):
            self.assertIn(mounts[root]["name"], templates,
                          f"--root {root} is not on the pod's own volume")

    def test_drain_fits_in_the_termination_grace(self):
        for workload in self.servers:
            _, args = server_container(workload)
            grace = float(ds.flag_values(args, "--shutdown-grace")[0])
            self.assertGreater(pod_spec(workload)["terminationGracePeriodSeconds"],
                               grace, workload["metadata"]["name"])

    def test_workers_match_the_cpu_limit(self):
        # tensormorphd's default (0) counts the node's cores.
        for workload in self.servers:
            container, args = server_container(workload)
            self.assertEqual(
                ds.flag_values(args, "--workers"),
                [str(container["resources"]["limits"]["cpu"])],
                workload["metadata"]["name"])

    # --- every pod -----------------------------------------------------

    def every_pod(self):
        for overlay, objects in self.rendered.items():
            for o in objects:
                if o["kind"] in ("Deployment", "StatefulSet", "Job"):
                    yield overlay, o

    def test_every_pod_is_non_root_read_only_and_without_privileges(self):
        uid = self.image_uid()
        for overlay, workload in self.every_pod():
            spec = pod_spec(workload)
            where = f"{overlay} {workload['metadata']['name']}"
            self.assertFalse(spec.get("automountServiceAccountToken", True),
                             where)
            self.assertTrue(spec["securityContext"]["runAsNonRoot"], where)
            self.assertEqual(spec["securityContext"]["runAsUser"], uid, where)
            self.assertEqual(
                spec["securityContext"]["seccompProfile"]["type"],
                "RuntimeDefault", where)
            for c in spec["containers"]:
                sc = c["securityContext"]
                with self.subTest(where=where, container=c["name"]):
                    self.assertTrue(sc["runAsNonRoot"])
                    self.assertEqual(sc["runAsUser"], uid)
                    self.assertTrue(sc["readOnlyRootFilesystem"])
                    self.assertFalse(sc["allowPrivilegeEscalation"])
                    self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
                    self.assertEqual(sc["seccompProfile"]["type"],
                                     "RuntimeDefault")
                    for bound in ("requests", "limits"):
                        self.assertIn("cpu", c["resources"][bound])
                        self.assertIn("memory", c["resources"][bound])

    def test_every_image_is_the_one_the_dockerfile_builds(self):
        tag = self.dockerfile.documented_tag()
        self.assertEqual(tag, "tensormorph:" + ds.project_version(),
                         "the Dockerfile's documented tag is the version")
        for overlay, workload in self.every_pod():
            for c in pod_spec(workload)["containers"]:
                self.assertEqual(c["image"], tag,
                                 f"{overlay} {workload['metadata']['name']}")

    def test_every_object_carries_the_common_label(self):
        for overlay, objects in self.rendered.items():
            for o in objects:
                self.assertEqual(
                    o["metadata"].get("labels", {}).get(
                        "app.kubernetes.io/part-of"), "tensormorph",
                    f"{overlay} {o['kind']} {o['metadata']['name']}")

    def test_roots_are_the_read_only_mounts_and_the_images_models(self):
        image_roots = ds.flag_values(self.image_entrypoint(), "--root")
        self.assertEqual(image_roots, ["/models"])
        self.assertIn('["/models"]', self.dockerfile.all("VOLUME"))
        for workload in self.servers:
            container, args = server_container(workload)
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            name = workload["metadata"]["name"]
            self.assertEqual(ds.flag_values(args, "--root"), image_roots, name)
            for root in image_roots:
                self.assertIn(root, mounts, name)
                self.assertTrue(mounts[root].get("readOnly"), name)
            volumes = {v["name"]: v for v in pod_spec(workload).get("volumes",
                                                                     [])}
            volume = volumes.get(mounts["/models"]["name"], {})
            if "persistentVolumeClaim" in volume:
                self.assertTrue(volume["persistentVolumeClaim"].get("readOnly"))

    # --- flags -----------------------------------------------------------

    def server_argvs(self):
        return [server_container(w)[1] for w in self.servers]

    def cli_uses(self):
        """(where, globals, command, args) of every tensormorph run by a
        Job's script."""
        for overlay in ("batch-diff", "batch-diff/merge"):
            for job in find(self.rendered[overlay], "Job"):
                for c in pod_spec(job)["containers"]:
                    for before, command, args in ds.cli_invocations(
                            shell_script(c)):
                        yield (f"{overlay} {job['metadata']['name']}", before,
                               command, args)

    def test_every_server_flag_used_exists(self):
        known = ds.server_options()
        for args in self.server_argvs():
            for flag in ds.flags_of(args):
                self.assertIn(flag, known, "not a tensormorphd flag")

    def test_every_cli_flag_and_command_used_exists(self):
        commands = ds.cli_commands()
        for where, before, command, args in self.cli_uses():
            for flag in ds.flags_of(before):
                self.assertIn(flag, ds.cli_options(), f"{where}: global flag")
            self.assertIn(command, commands, where)
            for flag in ds.flags_of(args):
                self.assertIn(flag, ds.cli_options(command),
                              f"{where}: tensormorph {command}")

    def test_the_server_accepts_each_deployments_command_line(self):
        for args in self.server_argvs():
            server = ds.RunningServer(args)
            try:
                health = subprocess.run(
                    [ds.CLI, "health", "--server", server.address],
                    capture_output=True, text=True)
                self.assertEqual(health.returncode, 0, health.stderr)
            finally:
                server.stop()

    # --- batch diff ------------------------------------------------------

    def parts(self):
        job = find(self.rendered["batch-diff"], "Job", "tensormorph-diff")[0]
        return job, job["spec"], pod_spec(job)["containers"][0]

    def test_the_diff_job_is_indexed_with_one_pod_per_part(self):
        job, spec, container = self.parts()
        self.assertEqual(spec["completionMode"], "Indexed")
        uses = [u for u in self.cli_uses() if u[0].endswith("tensormorph-diff")]
        self.assertEqual(len(uses), 1)
        _, before, command, args = uses[0]
        self.assertEqual(command, "diff")
        part = ds.flag_values(args, "--part")
        self.assertEqual(len(part), 1, args)
        m = re.fullmatch(r"\$\{?JOB_COMPLETION_INDEX\}?/(\d+)", part[0])
        self.assertIsNotNone(m, f"--part {part[0]}: want "
                             "$JOB_COMPLETION_INDEX/N")
        n = int(m.group(1))
        self.assertEqual(spec["completions"], n)
        self.assertEqual(spec["parallelism"], n)
        self.assertIn("--json", before)

    def test_the_diff_job_asks_the_serving_service(self):
        _, before, _, _ = [u for u in self.cli_uses()
                           if u[0].endswith("tensormorph-diff")][0]
        server = ds.flag_values(before, "--server")[0]
        service = find(self.rendered["serving"], "Service", "tensormorph")[0]
        grpc = {p["name"]: p["port"] for p in service["spec"]["ports"]}["grpc"]
        self.assertEqual(server,
                         f"dns:///{service['metadata']['name']}:{grpc}")

    def test_the_merge_reads_exactly_the_parts_from_the_claim_they_are_written_to(self):
        job, spec, container = self.parts()
        n = spec["completions"]
        script = shell_script(container)
        parts_mount = container["volumeMounts"][0]
        written = re.search(r"out=(\S+?);", script).group(1)
        self.assertEqual(
            written,
            parts_mount["mountPath"] + "/part-$JOB_COMPLETION_INDEX.jsonl")
        self.assertIn('mv "$out.tmp" "$out"', script,
                      "a part appears under its name only when whole")
        claim = {v["name"]: v for v in pod_spec(job)["volumes"]}[
            parts_mount["name"]]["persistentVolumeClaim"]["claimName"]
        pvc = find(self.rendered["batch-diff"], "PersistentVolumeClaim",
                   claim)[0]
        self.assertEqual(pvc["spec"]["accessModes"], ["ReadWriteMany"])

        merge = find(self.rendered["batch-diff/merge"], "Job")[0]
        merge_container = pod_spec(merge)["containers"][0]
        merge_mount = merge_container["volumeMounts"][0]
        self.assertEqual(
            {v["name"]: v for v in pod_spec(merge)["volumes"]}[
                merge_mount["name"]]["persistentVolumeClaim"]["claimName"],
            claim)
        uses = [u for u in self.cli_uses()
                if u[0].endswith("tensormorph-diff-merge")]
        self.assertEqual(len(uses), 1)
        _, _, command, args = uses[0]
        self.assertEqual(command, "diff-merge")
        inputs = [a for a in args if not a.startswith("--") and
                  a.endswith(".jsonl")]
        self.assertEqual(inputs, [f"{merge_mount['mountPath']}/part-{i}.jsonl"
                                  for i in range(n)])
        self.assertNotRegex(shell_script(merge_container), r"[*?]\.jsonl",
                            "parts are named, not globbed")


if __name__ == "__main__":
    unittest.main()

"""deploy/k8s rendered as kubectl renders it (`kubectl kustomize`, Debian's
kubernetes-client or a newer one), and the rendered objects checked against
one another, against deploy/Dockerfile and against what the built binaries
accept: the ports a server listens on are the ones its container, probes and
Service name; its roots are its read-only mounts and the image's /models (or
an object-store prefix with a cache volume and credentials from a Secret); the
diff Job's parts are the merge Job's inputs; every overlay has a NetworkPolicy
and mounts its tokens from a Secret; connections are recycled without cutting
a call; batch diffs ask servers of their own, each run's parts carrying its
run id; whatever holds data runs at least two replicas under a
PodDisruptionBudget."""

import os
import re
import shutil
import subprocess
import unittest

import yaml

import deploy_support as ds

K8S = ds.source("deploy", "k8s")
OVERLAYS = ["serving", "object-store", "shard-affine", "batch-servers",
            "batch-diff", "batch-diff/merge", "nightly-diff"]
# Overlays that are one choice, never applied side by side (the same names).
ALTERNATIVES = [{"serving", "object-store"}]
# Server flags another branch adds (the lead's object-store roots): until the
# built tensormorphd has them, the checks that run it skip the workloads
# using them, and say so.
PENDING_SERVER_FLAGS = {"--cache-dir", "--cache-bytes"}
# tensormorphd's default --max-call-seconds (server/service.h).
DEFAULT_MAX_CALL_SECONDS = 3600
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


def pod_template(workload):
    spec = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]


def pod_spec(workload):
    return pod_template(workload)["spec"]


def job_spec(workload):
    """The Job spec of a Job or of a CronJob's jobTemplate."""
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]
    return workload["spec"]


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


def label_selector_matches(selector, labels):
    """A LabelSelector (matchLabels and matchExpressions In/NotIn/Exists/
    DoesNotExist) against `labels`; {} selects everything."""
    if not selects(selector.get("matchLabels", {}), labels):
        return False
    for e in selector.get("matchExpressions", []):
        op, key = e["operator"], e["key"]
        if op == "In" and labels.get(key) not in e["values"]:
            return False
        if op == "NotIn" and labels.get(key) in e["values"]:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def mount_of(container, pod, path):
    """(volumeMount, volume) of the mount holding `path` in `container`."""
    best = None
    for m in container.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"]):
                best = m
    if best is None:
        return None, None
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    return best, volumes.get(best["name"])


def positionals(args, command):
    """The arguments of `tensormorph COMMAND args` that are no option and no
    option's value."""
    options = ds.cli_options(command)
    out = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            name = {"-o": "--output"}.get(a, a.split("=", 1)[0])
            if options.get(name) and "=" not in a:
                i += 1
        else:
            out.append(a)
        i += 1
    return out


def int_flag(args, flag, default=None):
    values = ds.flag_values(args, flag)
    return int(values[-1]) if values else default


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
        cls.store = find(cls.rendered["object-store"], "Deployment",
                         "tensormorph")[0]
        cls.shards = find(cls.rendered["shard-affine"], "StatefulSet")[0]
        cls.batch = find(cls.rendered["batch-servers"], "Deployment",
                         "tensormorph-batch")[0]
        cls.servers = [cls.serving, cls.store, cls.shards, cls.batch]
        # Each server workload with the overlay that defines it.
        cls.server_overlays = [("serving", cls.serving),
                               ("object-store", cls.store),
                               ("shard-affine", cls.shards),
                               ("batch-servers", cls.batch)]

    def runnable_servers(self):
        """The server workloads whose flags the built tensormorphd has all
        of (see PENDING_SERVER_FLAGS)."""
        known = ds.server_options()
        out = []
        for w in self.servers:
            _, args = server_container(w)
            if PENDING_SERVER_FLAGS & set(ds.flags_of(args)) - set(known):
                continue
            out.append(w)
        return out

    def image_entrypoint(self):
        return ds.exec_form(self.dockerfile.all("ENTRYPOINT")[-1])

    def image_uid(self):
        user = self.dockerfile.all("USER", self.dockerfile.last_stage())[-1]
        return int(user.split(":")[0])

    # --- ports ---------------------------------------------------------

    def test_every_server_listens_where_its_container_probes_and_service_say(self):
        for overlay, workload in self.server_overlays:
            objects = self.rendered[overlay]
            name = workload["metadata"]["name"]
            container, args = server_container(workload)
            with self.subTest(workload=name, overlay=overlay):
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
        for overlay, workload in self.server_overlays:
            objects = self.rendered[overlay]
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
        # Among the workloads of overlays that may run side by side.
        for overlay, _ in self.server_overlays:
            others = set().union(*[a - {overlay} for a in ALTERNATIVES
                                   if overlay in a])
            workloads = [w for o, w in self.server_overlays if o not in others]
            for service in find(self.rendered[overlay], "Service"):
                chosen = [w["metadata"]["name"] for w in workloads
                          if selects(service["spec"]["selector"],
                                     pod_template(w)["metadata"]["labels"])]
                self.assertEqual(len(chosen), 1,
                                 f"{overlay}: Service "
                                 f"{service['metadata']['name']} selects "
                                 f"{chosen}")

    # --- serving ---------------------------------------------------------

    def test_serving_runs_several_pods_recycling_connections(self):
        self.assertGreaterEqual(self.serving["spec"]["replicas"], 2)
        _, args = server_container(self.serving)
        age = ds.flag_values(args, "--max-connection-age")
        self.assertEqual(len(age), 1, "--max-connection-age: clients must "
                         "reconnect and re-resolve for new pods to get calls")
        self.assertGreater(int(age[0]), 0)
        self.assertLessEqual(int(age[0]), 3600)

    def test_every_server_runs_two_replicas_under_a_disruption_budget(self):
        # Whatever holds data (a volume's checkpoints, a shard set, a cache of
        # the store) keeps a copy serving through a drain: two replicas at
        # least and a budget that lets fewer than all go.
        for overlay, workload in self.server_overlays:
            name = workload["metadata"]["name"]
            replicas = workload["spec"]["replicas"]
            with self.subTest(workload=name, overlay=overlay):
                self.assertGreaterEqual(replicas, 2)
                labels = pod_template(workload)["metadata"]["labels"]
                pdbs = [p for p in find(self.rendered[overlay],
                                        "PodDisruptionBudget")
                        if label_selector_matches(p["spec"]["selector"],
                                                  labels)]
                self.assertEqual(len(pdbs), 1, name)
                spec = pdbs[0]["spec"]
                if "maxUnavailable" in spec:
                    self.assertGreaterEqual(spec["maxUnavailable"], 1)
                    self.assertLess(spec["maxUnavailable"], replicas)
                else:
                    self.assertGreaterEqual(spec["minAvailable"], 1)
                    self.assertLess(spec["minAvailable"], replicas)

    def test_every_shard_set_is_held_twice(self):
        # Pod i holds set i mod S: an even multiple of the sets, and the
        # budget (maxUnavailable 1) and the StatefulSet's one-at-a-time
        # updates never take both copies of a set.
        replicas = self.shards["spec"]["replicas"]
        self.assertEqual(replicas % 2, 0)
        self.assertGreaterEqual(replicas, 4)
        pdb = find(self.rendered["shard-affine"], "PodDisruptionBudget")[0]
        self.assertEqual(pdb["spec"].get("maxUnavailable"), 1)
        self.assertEqual(
            self.shards["spec"].get("updateStrategy", {}).get(
                "rollingUpdate", {}).get("maxUnavailable", 1), 1)

    def test_shard_pods_serve_their_own_volume_backed_by_the_store(self):
        spec = self.shards["spec"]
        service = find(self.rendered["shard-affine"], "Service",
                       spec["serviceName"])[0]
        self.assertEqual(service["spec"]["clusterIP"], "None")
        container, args = server_container(self.shards)
        self.assertNotIn("--partial-shards", args)  # refused: --backing
        templates = {t["metadata"]["name"] for t in spec["volumeClaimTemplates"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        roots = ds.flag_values(args, "--root")
        for root in roots:
            self.assertIn(mounts[root]["name"], templates,
                          f"--root {root} is not on the pod's own volume")
        # Every root is backed by an object-store prefix, once.
        backings = [b.split("=", 1) for b in ds.flag_values(args, "--backing")]
        self.assertEqual(sorted(r for r, _ in backings), sorted(roots))
        for _, url in backings:
            self.assertRegex(url, r"^s3://[a-z0-9.-]+/.+")
        # Credentials from the Secret, as the object-store overlay takes them.
        env = {e["name"]: e for e in container["env"]}
        for var, key in (("AWS_ACCESS_KEY_ID", "access-key-id"),
                         ("AWS_SECRET_ACCESS_KEY", "secret-access-key")):
            self.assertNotIn("value", env[var], var)
            self.assertEqual(env[var]["valueFrom"]["secretKeyRef"],
                             {"name": "tensormorph-s3", "key": key})
        for e in container["env"]:
            if "SECRET" in e["name"] or "TOKEN" in e["name"]:
                self.assertNotIn("value", e, e["name"])
        # Fetched blocks on a cache volume larger than its cap.
        cache = ds.flag_values(args, "--cache-dir")
        self.assertEqual(len(cache), 1)
        mount, volume = mount_of(container, pod_spec(self.shards), cache[0])
        self.assertFalse(mount.get("readOnly", False))
        m = re.fullmatch(r"(\d+)Gi", volume["emptyDir"]["sizeLimit"])
        self.assertIsNotNone(m)
        self.assertGreater(int(m.group(1)) << 30, int_flag(args, "--cache-bytes"))

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
                if o["kind"] in ("Deployment", "StatefulSet", "Job",
                                 "CronJob"):
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
            if any("://" in r for r in ds.flag_values(args, "--root")):
                continue  # an object store (test_object_store_...)
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
        for overlay, kind in (("batch-diff", "Job"),
                              ("batch-diff/merge", "Job"),
                              ("nightly-diff", "CronJob")):
            for job in find(self.rendered[overlay], kind):
                for c in pod_spec(job)["containers"]:
                    for before, command, args in ds.cli_invocations(
                            shell_script(c)):
                        yield (f"{overlay} {job['metadata']['name']}", before,
                               command, args)

    def test_every_server_flag_used_exists(self):
        known = ds.server_options()
        pending = set()
        for args in self.server_argvs():
            for flag in ds.flags_of(args):
                if flag in PENDING_SERVER_FLAGS and flag not in known:
                    pending.add(flag)
                    continue
                self.assertIn(flag, known, "not a tensormorphd flag")
        if pending:
            self.skipTest(f"tensormorphd has no {sorted(pending)} yet "
                          "(object-store roots, another branch)")

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
        for workload in self.runnable_servers():
            _, args = server_container(workload)
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

    def test_batch_diffs_ask_servers_of_their_own_not_the_serving_pods(self):
        serving_labels = [pod_template(w)["metadata"]["labels"]
                          for w in (self.serving, self.store, self.shards)]
        serving_services = {s["metadata"]["name"]
                            for o in ("serving", "object-store", "shard-affine")
                            for s in find(self.rendered[o], "Service")}
        batch_labels = pod_template(self.batch)["metadata"]["labels"]
        uses = [u for u in self.cli_uses() if u[2] == "diff"]
        self.assertEqual(len(uses), 2, [u[0] for u in uses])
        for where, before, _, _ in uses:
            overlay = where.split(" ")[0]
            with self.subTest(where=where):
                server = ds.flag_values(before, "--server")[0]
                m = re.fullmatch(r"dns:///([a-z0-9-]+):(\d+)", server)
                self.assertIsNotNone(m, server)
                self.assertNotIn(m.group(1), serving_services)
                # The Service is in the overlay applied with the Job, and
                # selects the batch servers only.
                service = find(self.rendered[overlay], "Service",
                               m.group(1))[0]
                selector = service["spec"]["selector"]
                self.assertTrue(selects(selector, batch_labels))
                for labels in serving_labels:
                    self.assertFalse(selects(selector, labels))
                grpc = {p["name"]: p["port"]
                        for p in service["spec"]["ports"]}["grpc"]
                self.assertEqual(int(m.group(2)), grpc)
                self.assertIn(self.batch, find(self.rendered[overlay],
                                               "Deployment"))

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


    # --- network ---------------------------------------------------------

    def policies_for(self, overlay, workload):
        labels = pod_template(workload)["metadata"]["labels"]
        return [p for p in find(self.rendered[overlay], "NetworkPolicy")
                if label_selector_matches(p["spec"]["podSelector"], labels)]

    def test_every_pod_of_every_overlay_is_under_a_network_policy(self):
        for overlay, workload in self.every_pod():
            with self.subTest(overlay=overlay,
                              workload=workload["metadata"]["name"]):
                policies = self.policies_for(overlay, workload)
                self.assertEqual(len(policies), 1,
                                 [p["metadata"]["name"] for p in policies])
                self.assertEqual(sorted(policies[0]["spec"]["policyTypes"]),
                                 ["Egress", "Ingress"])

    def test_servers_admit_only_labelled_clients_to_their_ports(self):
        for overlay, workload in self.server_overlays:
            container, _ = server_container(workload)
            ports = {p["containerPort"] for p in container["ports"]}
            policy = self.policies_for(overlay, workload)[0]
            with self.subTest(overlay=overlay):
                self.assertTrue(policy["spec"].get("ingress"))
                for rule in policy["spec"]["ingress"]:
                    # No rule open to all: each names its peers by label.
                    self.assertTrue(rule.get("from"), rule)
                    for peer in rule["from"]:
                        self.assertNotIn("ipBlock", peer)
                        selector = peer["podSelector"]
                        self.assertTrue(selector.get("matchLabels") or
                                        selector.get("matchExpressions"),
                                        peer)
                    self.assertTrue(rule.get("ports"), rule)
                    self.assertLessEqual({p["port"] for p in rule["ports"]},
                                         ports)

    def test_the_batch_servers_admit_only_the_diff_parts(self):
        policy = self.policies_for("batch-servers", self.batch)[0]
        parts = [w for o, w in self.every_pod()
                 if o in ("batch-diff", "nightly-diff") and
                 w["kind"] in ("Job", "CronJob")]
        self.assertEqual(len(parts), 2)
        for rule in policy["spec"]["ingress"]:
            for peer in rule["from"]:
                self.assertNotIn("namespaceSelector", peer)
                for w in parts:
                    self.assertTrue(label_selector_matches(
                        peer["podSelector"],
                        pod_template(w)["metadata"]["labels"]))
                for w in (self.serving, self.store, self.shards):
                    self.assertFalse(label_selector_matches(
                        peer["podSelector"],
                        pod_template(w)["metadata"]["labels"]))

    def test_egress_is_dns_and_what_the_pod_reads_only(self):
        # DNS (53) to kube-dns everywhere; 443 only where a root is in an
        # object store; the batch servers' gRPC port only from the parts.
        for overlay, workload in self.every_pod():
            for policy in self.policies_for(overlay, workload):
                c = pod_spec(workload)["containers"][0]
                args = c.get("args", [])
                roots = ds.flag_values(args, "--root") + [
                    b.split("=", 1)[-1]
                    for b in ds.flag_values(args, "--backing")]
                allowed = {53}
                if any(r.startswith("s3://") or r.startswith("https://")
                       for r in roots):
                    allowed.add(443)
                if pod_template(workload)["metadata"]["labels"].get(
                        "app.kubernetes.io/component") == "diff-part":
                    allowed.add(7431)
                with self.subTest(overlay=overlay,
                                  policy=policy["metadata"]["name"]):
                    for rule in policy["spec"].get("egress", []):
                        self.assertTrue(rule.get("ports"), rule)
                        self.assertTrue(rule.get("to"), rule)
                        self.assertLessEqual(
                            {p["port"] for p in rule["ports"]}, allowed)
                        for peer in rule["to"]:
                            if "ipBlock" in peer:
                                self.assertEqual({p["port"]
                                                  for p in rule["ports"]},
                                                 {443})
                                self.assertIn("169.254.0.0/16",
                                              peer["ipBlock"]["except"])

    # --- secrets -----------------------------------------------------------

    def assert_secret_file(self, container, pod, path, where):
        mount, volume = mount_of(container, pod, path)
        self.assertIsNotNone(mount, f"{where}: {path} is on no mount")
        self.assertTrue(mount.get("readOnly"), f"{where}: {path}")
        self.assertIn("secret", volume, f"{where}: {path}")
        secret = volume["secret"]
        # Only the key this pod needs, under the name it reads.
        items = {i["path"]: i["key"] for i in secret.get("items", [])}
        relative = path[len(mount["mountPath"].rstrip("/")) + 1:]
        self.assertIn(relative, items, f"{where}: {path}")
        self.assertEqual(secret["defaultMode"] & 0o222, 0, where)
        return secret["secretName"], items[relative]

    def test_every_server_reads_its_tokens_from_a_secret_mounted_read_only(self):
        for overlay, workload in self.server_overlays:
            container, args = server_container(workload)
            files = ds.flag_values(args, "--token-file")
            self.assertEqual(len(files), 1, overlay)
            name, key = self.assert_secret_file(container, pod_spec(workload),
                                                files[0], overlay)
            self.assertEqual((name, key), ("tensormorph-tokens", "tokens"))

    def test_every_diff_part_sends_the_client_token_from_the_secret(self):
        for where, before, command, _ in self.cli_uses():
            if command != "diff":
                continue
            overlay = where.split(" ")[0]
            kind = "CronJob" if overlay == "nightly-diff" else "Job"
            job = find(self.rendered[overlay], kind)[0]
            container = pod_spec(job)["containers"][0]
            files = ds.flag_values(before, "--token-file")
            self.assertEqual(len(files), 1, where)
            name, key = self.assert_secret_file(container, pod_spec(job),
                                                files[0], where)
            self.assertEqual((name, key), ("tensormorph-tokens", "client"))

    def test_the_object_store_is_read_with_credentials_from_a_secret(self):
        container, args = server_container(self.store)
        roots = ds.flag_values(args, "--root")
        self.assertEqual(len(roots), 1)
        self.assertRegex(roots[0], r"^s3://[a-z0-9.-]+/.+")
        env = {e["name"]: e for e in container["env"]}
        for var, key in (("AWS_ACCESS_KEY_ID", "access-key-id"),
                         ("AWS_SECRET_ACCESS_KEY", "secret-access-key")):
            self.assertNotIn("value", env[var], var)
            self.assertEqual(env[var]["valueFrom"]["secretKeyRef"],
                             {"name": "tensormorph-s3", "key": key})
        # No credential anywhere in a literal.
        for e in container["env"]:
            if "SECRET" in e["name"] or "TOKEN" in e["name"]:
                self.assertNotIn("value", e, e["name"])

    def test_the_object_store_cache_is_a_volume_larger_than_its_cap(self):
        container, args = server_container(self.store)
        cache = ds.flag_values(args, "--cache-dir")
        self.assertEqual(len(cache), 1)
        mount, volume = mount_of(container, pod_spec(self.store), cache[0])
        self.assertEqual(mount["mountPath"], cache[0])
        self.assertFalse(mount.get("readOnly", False))
        cap = int_flag(args, "--cache-bytes")
        self.assertGreater(cap, 0)
        limit = volume["emptyDir"]["sizeLimit"]
        m = re.fullmatch(r"(\d+)Gi", limit)
        self.assertIsNotNone(m, limit)
        self.assertGreater(int(m.group(1)) << 30, cap,
                           "the kubelet evicts a pod past its sizeLimit")

    # --- connection age ----------------------------------------------------

    def test_recycling_a_connection_never_cuts_a_call(self):
        # gRPC closes a connection max-connection-age-grace after its GOAWAY,
        # calls in flight or not: no limit (0), or longer than any call may
        # run (--max-call-seconds).
        for overlay, workload in self.server_overlays:
            _, args = server_container(workload)
            with self.subTest(overlay=overlay):
                self.assertGreater(int_flag(args, "--max-connection-age", 0),
                                   0)
                grace = int_flag(args, "--max-connection-age-grace")
                self.assertIsNotNone(grace, "set explicitly: gRPC's own "
                                     "default differs between versions")
                longest = int_flag(args, "--max-call-seconds",
                                   DEFAULT_MAX_CALL_SECONDS)
                self.assertTrue(grace == 0 or grace > longest,
                                f"grace {grace} s cuts calls of up to "
                                f"{longest} s")

    # --- runs --------------------------------------------------------------

    def diff_runs(self):
        """(overlay, workload, Job spec, container) of each batch diff."""
        for overlay, kind in (("batch-diff", "Job"),
                              ("nightly-diff", "CronJob")):
            w = find(self.rendered[overlay], kind)[0]
            yield overlay, w, job_spec(w), pod_spec(w)["containers"][0]

    def test_every_part_carries_its_jobs_uid_as_run_id(self):
        for overlay, _, spec, container in self.diff_runs():
            with self.subTest(overlay=overlay):
                env = {e["name"]: e for e in container.get("env", [])}
                self.assertEqual(
                    env["TENSORMORPH_RUN_ID"]["valueFrom"]["fieldRef"]
                    ["fieldPath"], "metadata.labels['controller-uid']")
                uses = [u for u in self.cli_uses()
                        if u[0].startswith(overlay + " ") and u[2] == "diff"]
                self.assertEqual(len(uses), 1)
                self.assertEqual(ds.flag_values(uses[0][3], "--run-id"),
                                 ["$TENSORMORPH_RUN_ID"])

    def test_every_run_has_a_deadline_past_its_longest_call_and_a_ttl(self):
        longest = int_flag(server_container(self.batch)[1],
                           "--max-call-seconds", DEFAULT_MAX_CALL_SECONDS)
        for overlay, _, spec, _ in self.diff_runs():
            with self.subTest(overlay=overlay):
                self.assertGreater(spec["activeDeadlineSeconds"], longest)
                self.assertGreater(spec["ttlSecondsAfterFinished"], 0)

    def test_the_nightly_cronjob_runs_one_night_at_a_time_in_n_parts(self):
        cron = find(self.rendered["nightly-diff"], "CronJob")[0]
        self.assertEqual(cron["spec"]["concurrencyPolicy"], "Forbid")
        self.assertIn("startingDeadlineSeconds", cron["spec"])
        spec = job_spec(cron)
        self.assertEqual(spec["completionMode"], "Indexed")
        uses = {u[2]: u for u in self.cli_uses()
                if u[0].startswith("nightly-diff ")}
        part = ds.flag_values(uses["diff"][3], "--part")[0]
        m = re.fullmatch(r"\$\{?JOB_COMPLETION_INDEX\}?/(\d+)", part)
        self.assertIsNotNone(m, part)
        n = int(m.group(1))
        self.assertEqual(spec["completions"], n)
        self.assertEqual(spec["parallelism"], n)
        # The merge names the N parts of this night's directory, and the
        # pod only merges when all N are there.
        script = shell_script(pod_spec(cron)["containers"][0])
        self.assertIn("run=/results/runs/$TENSORMORPH_RUN_ID;", script)
        self.assertIn('test -n "$TENSORMORPH_RUN_ID";', script)
        self.assertEqual(positionals(uses["diff-merge"][3], "diff-merge"),
                         [f"$run/part-{i}.jsonl" for i in range(n)])
        self.assertIn("for i in " + " ".join(map(str, range(n))) + "; do",
                      script)
        self.assertIn('mv "$out.tmp" "$out"', script)
        # A tripped gate, a refused merge or undecodable tensors fail the
        # night at once.
        rules = spec["podFailurePolicy"]["rules"]
        fail = [r for r in rules if r["action"] == "FailJob"]
        self.assertEqual(len(fail), 1)
        self.assertEqual(sorted(fail[0]["onExitCodes"]["values"]), [1, 3, 4])


if __name__ == "__main__":
    unittest.main()

// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// validate_test.mjs: validate.mjs fails where it should. Each case plants one error in a copy
// of deploy/kubernetes/tricolor.yaml and expects validate.mjs to exit 1 with a message naming
// the place; the unchanged copy must pass. Prints each case, then 'N passed, N failed'.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const manifest = path.resolve(here, "../../deploy/kubernetes/tricolor.yaml");
const original = readFileSync(manifest, "utf8");
const work = mkdtempSync(path.join(os.tmpdir(), "tricolor-k8s-validate-"));
process.on("exit", () => rmSync(work, { recursive: true, force: true }));

// [what, from, to, a pattern the message must match]. `from` must occur in the manifest.
const cases = [
  ["a port as a string", "containerPort: 9464", 'containerPort: "x"', /containers\[0\]\.ports\[0\]\.containerPort: must be integer/],
  ["a boolean as a string", "hostNetwork: true", 'hostNetwork: "yes"', /spec\.template\.spec\.hostNetwork: must be boolean/],
  ["a misspelled field", "hostNetwork: true", "hostNetwrok: true", /spec\.template\.spec\.hostNetwrok: unknown field/],
  ["an unknown top-level field", "automountServiceAccountToken: false\n---", "automountServiceAcountToken: false\n---", /ServiceAccount tricolor-system\/tricolord: automountServiceAcountToken: unknown field/],
  ["a value not in an enum", "type: RollingUpdate", "type: Rolling", /updateStrategy\.type: must be equal to one of the allowed values/],
  ["a bad quantity", "memory: 512Mi", "memory: lots", /limits\.memory: .*quantity/],
  ["a missing required field", "        - name: tricolord\n", "        - nam: tricolord\n", /containers\[0\]: must have required property name/],
  ["an unknown kind", "kind: DaemonSet", "kind: DaemonSett", /unknown kind: .* no DaemonSett in apps\/v1/],
  ["a duplicate key", "hostPID: false", "hostPID: false\n      hostPID: true", /YAML: Map keys must be unique/],
  ["a YAML syntax error", "  name: tricolor-system\n  labels:", "  name: [tricolor-system\n  labels:", /YAML: /],
  ["a mount of no volume", "        - name: tmp\n          emptyDir", "        - name: scratch\n          emptyDir", /volumeMounts\[\d+\]\.name: no volume named "tmp"/],
  ["a selector the template does not match", "    matchLabels:\n      app.kubernetes.io/name: tricolord", "    matchLabels:\n      app.kubernetes.io/name: other", /the selector wants app\.kubernetes\.io\/name=other/],
  ["Bidirectional in an unprivileged container", "mountPropagation: HostToContainer", "mountPropagation: Bidirectional", /Bidirectional is allowed only in a privileged container/],
  ["allowPrivilegeEscalation: false beside SYS_ADMIN", "            runAsUser: 0\n", "            runAsUser: 0\n            allowPrivilegeEscalation: false\n", /allowPrivilegeEscalation: cannot be false/],
  ["a $(VAR) that is not an env", "$(NODE_IP):9464", "$(NODEIP):9464", /\$\(NODEIP\) is not an env/],
  ["a ConfigMap that these files do not make", "            name: tricolor-config\n", "            name: tricolor-conf\n", /no ConfigMap tricolor-system\/tricolor-conf/],
  ["an annotation that is not a string", 'prometheus.io/port: "9464"', "prometheus.io/port: 9464", /annotations\["prometheus\.io\/port"\]: must be string/],
];

let passed = 0,
  failed = 0;
function validate(text) {
  const file = path.join(work, "tricolor.yaml");
  writeFileSync(file, text);
  return spawnSync(process.execPath, [path.join(here, "validate.mjs"), file], { encoding: "utf8" });
}

const clean = validate(original);
if (clean.status === 0) (console.log("ok   the manifest as it is passes"), passed++);
else (console.log(`FAIL the manifest as it is: ${clean.stderr}`), failed++);

for (const [what, from, to, want] of cases) {
  if (!original.includes(from)) {
    console.log(`FAIL ${what}: the manifest no longer has ${JSON.stringify(from)} (update this case)`);
    failed++;
    continue;
  }
  const r = validate(original.replace(from, to));
  const msg = r.stderr.split("\n").filter((l) => l && !l.startsWith("validate.mjs:")).join(" | ");
  if (r.status === 1 && want.test(r.stderr)) {
    console.log(`ok   ${what}: ${msg}`);
    passed++;
  } else {
    console.log(`FAIL ${what}: status ${r.status}, ${r.stdout}${r.stderr}`);
    failed++;
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exitCode = failed ? 1 : 0;

// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// validate.mjs: every YAML document of deploy/kubernetes/*.yaml (or of the files named on the
// command line) checked as the API server would take it, without a cluster:
//   1. YAML: syntax, duplicate keys, one object per document;
//   2. the kind: apiVersion and kind must name an object of the Kubernetes API as the
//      kubernetes-models package knows it (its class, from kubernetes-models/GROUP/VERSION/KIND);
//      anything else (a typo, a custom resource) is refused;
//   3. the schema: new Class(doc).validate(), the API's OpenAPI schema compiled by the package
//      (types, enums, required fields, quantities, int-or-string...);
//   4. unknown fields: the package's schemas do not refuse fields they do not define (their
//      objects allow additional properties), and the package exposes no schema to walk, so
//      the same validation is run again over a proxy of the document that records which fields
//      the compiled validator reads: a field it never reads is not in the schema. An object
//      that the validator enumerates (a map: labels, data, resources.limits) takes any key. A
//      free-form object the schema leaves unchecked (none here) would not be looked into;
//   5. rules of the API server that a schema cannot say, checked for pod templates: the
//      selector matches the template's labels, container names are unique, every volumeMount
//      names a volume, Bidirectional propagation needs a privileged container,
//      allowPrivilegeEscalation: false is refused with privileged or SYS_ADMIN, a hostNetwork
//      pod's hostPort equals its containerPort; and between these files: a namespace,
//      ServiceAccount or ConfigMap a pod or object uses is created by them, and every $(VAR) in
//      a container's command and args is one of its env (else Kubernetes passes it on as is).
// Prints one line per problem, FILE:LINE: KIND NAMESPACE/NAME: PATH: what, and exits 1 when
// there is any; 0 and a summary when there is none.
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { LineCounter, parseAllDocuments } from "yaml";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const deployDir = path.join(repo, "deploy/kubernetes");
const modelsVersion = JSON.parse(
  readFileSync(path.join(here, "node_modules/kubernetes-models/package.json"), "utf8"),
).version;

const problems = [];
const objects = []; // {file, doc, lineCounter, obj, label}

function isPlainObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

// metadata.name etc. as `Kind ns/name`.
function labelOf(obj) {
  const kind = typeof obj?.kind === "string" ? obj.kind : "(no kind)";
  const md = isPlainObject(obj?.metadata) ? obj.metadata : {};
  const name = typeof md.name === "string" ? md.name : "(no name)";
  return `${kind} ${md.namespace ? `${md.namespace}/` : ""}${name}`;
}

// A path as [key, index, ...] to spec.template.spec.containers[0].name.
function showPath(p) {
  let s = "";
  for (const k of p)
    if (typeof k === "number") s += `[${k}]`;
    else if (!/^[A-Za-z_$][\w$-]*$/.test(k)) s += `[${JSON.stringify(k)}]`;
    else s += s ? `.${k}` : k;
  return s || "(the document)";
}

// The line of the deepest node of @p that exists in the document.
function lineOf(o, p) {
  for (let n = p.length; n >= 0; n--) {
    const node = o.doc.getIn(p.slice(0, n), true);
    const range = node?.range ?? (n === 0 ? o.doc.contents?.range : undefined);
    if (range) return o.lineCounter.linePos(range[0]).line;
  }
  return 1;
}

function problem(o, p, what) {
  const where = o.doc ? `${o.file}:${lineOf(o, p)}` : o.file;
  problems.push(`${where}: ${o.label}: ${showPath(p)}: ${what}`);
}

// ajv's instancePath (/spec/template/...) as a path.
function pathOfPointer(ptr) {
  return ptr
    .split("/")
    .slice(1)
    .map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"))
    .map((s) => (/^\d+$/.test(s) ? Number(s) : s));
}

// ---- 2. the class of a kind ----

const classes = new Map();
async function classOf(apiVersion, kind) {
  const key = `${apiVersion}/${kind}`;
  if (classes.has(key)) return classes.get(key);
  let cls = null;
  // Names only: nothing else may reach import().
  if (/^([a-z0-9.-]+\/)?v\d+((alpha|beta)\d+)?$/.test(apiVersion) && /^[A-Z][A-Za-z0-9]*$/.test(kind)) {
    try {
      const mod = await import(`kubernetes-models/${apiVersion}/${kind}`);
      const c = mod[kind];
      if (typeof c === "function" && c.kind === kind && c.apiVersion === apiVersion) cls = c;
    } catch (e) {
      if (e.code !== "ERR_MODULE_NOT_FOUND" && e.code !== "ERR_PACKAGE_PATH_NOT_EXPORTED") throw e;
    }
  }
  classes.set(key, cls);
  return cls;
}

// ---- 4. which fields the validator reads ----

// A proxy of @value that records, for each object in it (by path), the fields read and whether
// its keys were enumerated, into @seen.
function recording(value, p, seen) {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value))
    return new Proxy(value, {
      get(t, k, r) {
        const v = Reflect.get(t, k, r);
        return typeof k === "string" && /^\d+$/.test(k) ? recording(v, [...p, Number(k)], seen) : v;
      },
    });
  const key = JSON.stringify(p);
  if (!seen.has(key)) seen.set(key, { read: new Set(), enumerated: false });
  const rec = seen.get(key);
  return new Proxy(value, {
    get(t, k, r) {
      if (typeof k !== "string") return Reflect.get(t, k, r);
      rec.read.add(k);
      const v = Reflect.get(t, k, r);
      return Object.hasOwn(t, k) ? recording(v, [...p, k], seen) : v;
    },
    has(t, k) {
      if (typeof k === "string") rec.read.add(k);
      return Reflect.has(t, k);
    },
    ownKeys(t) {
      rec.enumerated = true;
      return Reflect.ownKeys(t);
    },
  });
}

// The fields of @value no validator read, as paths.
function unread(value, p, seen, out) {
  if (Array.isArray(value)) {
    value.forEach((v, i) => unread(v, [...p, i], seen, out));
    return out;
  }
  if (!isPlainObject(value)) return out;
  const rec = seen.get(JSON.stringify(p));
  if (!rec) return out; // a free-form object: the schema does not look into it
  for (const k of Object.keys(value)) {
    if (!rec.enumerated && !rec.read.has(k)) out.push([...p, k]);
    else unread(value[k], [...p, k], seen, out);
  }
  return out;
}

function checkSchema(o, cls) {
  let schemaErrors = [];
  try {
    new cls(o.obj).validate();
  } catch (e) {
    if (!Array.isArray(e.errors)) throw e;
    schemaErrors = e.errors;
  }
  // One line per place: ajv says a oneOf's every branch.
  const byPath = new Map();
  for (const err of schemaErrors) {
    const p = pathOfPointer(err.instancePath ?? "");
    let what = err.message ?? err.keyword;
    if (err.keyword === "enum" && err.params?.allowedValues)
      what += ` (${err.params.allowedValues.map((v) => JSON.stringify(v)).join(", ")})`;
    const key = JSON.stringify(p);
    if (!byPath.has(key)) byPath.set(key, { p, what: [] });
    if (!byPath.get(key).what.includes(what)) byPath.get(key).what.push(what);
  }
  for (const { p, what } of byPath.values()) problem(o, p, `${what.join("; ")}`);

  // The class's own validate function over the recording proxy (the constructor would copy
  // the document, so `this` is the proxy itself).
  const seen = new Map();
  try {
    cls.prototype.validate.call(recording(o.obj, [], seen));
  } catch {
    // reported above
  }
  for (const p of unread(o.obj, [], seen, []))
    problem(o, p, `unknown field: the ${o.obj.apiVersion} ${o.obj.kind} schema has no "${p[p.length - 1]}" here`);
}

// ---- 5. rules of the API server, and references between the files ----

const wellKnownNamespaces = new Set(["default", "kube-system", "kube-public", "kube-node-lease"]);

// [path of the pod spec, path of the pod template's metadata] of a workload.
function podSpecPaths(obj) {
  switch (obj.kind) {
    case "Pod":
      return [["spec"], ["metadata"]];
    case "DaemonSet":
    case "Deployment":
    case "StatefulSet":
    case "ReplicaSet":
    case "Job":
      return [["spec", "template", "spec"], ["spec", "template", "metadata"]];
    case "CronJob":
      return [["spec", "jobTemplate", "spec", "template", "spec"], ["spec", "jobTemplate", "spec", "template", "metadata"]];
    default:
      return null;
  }
}

function get(obj, p) {
  return p.reduce((v, k) => (v == null ? undefined : v[k]), obj);
}

function checkPodTemplate(o, byKind) {
  const paths = podSpecPaths(o.obj);
  if (!paths) return;
  const [sp, mp] = paths;
  const spec = get(o.obj, sp);
  if (!isPlainObject(spec)) return;
  const ns = o.obj.metadata?.namespace ?? "default";

  const matchLabels = o.obj.kind === "Pod" || o.obj.kind === "Job" ? null : o.obj.spec?.selector?.matchLabels;
  const labels = get(o.obj, [...mp, "labels"]) ?? {};
  if (isPlainObject(matchLabels))
    for (const [k, v] of Object.entries(matchLabels))
      if (labels[k] !== v)
        problem(o, ["spec", "selector", "matchLabels", k], `the selector wants ${k}=${v}; the template's labels do not have it`);

  const volumes = new Set((spec.volumes ?? []).map((v) => v?.name));
  const names = new Set();
  const groups = [["initContainers", spec.initContainers], ["containers", spec.containers], ["ephemeralContainers", spec.ephemeralContainers]];
  for (const [group, list] of groups) {
    (list ?? []).forEach((c, i) => {
      if (!isPlainObject(c)) return;
      const cp = [...sp, group, i];
      if (names.has(c.name)) problem(o, [...cp, "name"], `container name "${c.name}" used twice`);
      names.add(c.name);
      const sc = c.securityContext ?? {};
      const privileged = sc.privileged === true;
      (c.volumeMounts ?? []).forEach((m, j) => {
        if (!volumes.has(m?.name)) problem(o, [...cp, "volumeMounts", j, "name"], `no volume named "${m?.name}" in the pod`);
        if (m?.mountPropagation === "Bidirectional" && !privileged)
          problem(o, [...cp, "volumeMounts", j, "mountPropagation"], "Bidirectional is allowed only in a privileged container");
      });
      const added = (sc.capabilities?.add ?? []).map((x) => String(x).replace(/^CAP_/, ""));
      if (sc.allowPrivilegeEscalation === false && (privileged || added.includes("SYS_ADMIN")))
        problem(o, [...cp, "securityContext", "allowPrivilegeEscalation"], "cannot be false with privileged: true or SYS_ADMIN added");
      if (spec.hostNetwork === true)
        (c.ports ?? []).forEach((port, j) => {
          if (port?.hostPort !== undefined && port.hostPort !== port.containerPort)
            problem(o, [...cp, "ports", j, "hostPort"], "with hostNetwork, hostPort must equal containerPort");
        });
      const env = new Set((c.env ?? []).map((e) => e?.name));
      for (const field of ["command", "args"])
        (c[field] ?? []).forEach((a, j) => {
          for (const m of String(a).matchAll(/(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g))
            if (!env.has(m[1])) problem(o, [...cp, field, j], `$(${m[1]}) is not an env of the container: Kubernetes leaves it as is`);
        });
    });
  }

  const sa = spec.serviceAccountName;
  if (sa && sa !== "default" && !byKind("ServiceAccount", ns, sa))
    problem(o, [...sp, "serviceAccountName"], `no ServiceAccount ${ns}/${sa} in these files`);
  (spec.volumes ?? []).forEach((v, i) => {
    const cm = v?.configMap?.name;
    if (cm && v.configMap.optional !== true && !byKind("ConfigMap", ns, cm))
      problem(o, [...sp, "volumes", i, "configMap", "name"], `no ConfigMap ${ns}/${cm} in these files`);
  });
}

// ---- the files ----

const args = process.argv.slice(2);
const files = args.length
  ? args
  : readdirSync(deployDir)
      .filter((f) => /\.ya?ml$/.test(f))
      .sort()
      .map((f) => path.join(deployDir, f));
if (files.length === 0) {
  console.error(`validate.mjs: no *.yaml in ${path.relative(process.cwd(), deployDir) || "."}`);
  process.exit(1);
}

for (const abs of files) {
  const file = path.relative(process.cwd(), path.resolve(abs)) || abs;
  let text;
  try {
    text = readFileSync(abs, "utf8");
  } catch (e) {
    problems.push(`${file}: cannot read: ${e.message}`);
    continue;
  }
  const lineCounter = new LineCounter();
  const docs = parseAllDocuments(text, { lineCounter, prettyErrors: true, uniqueKeys: true });
  for (const doc of Array.from(docs)) {
    const o = { file, doc, lineCounter, obj: null, label: "(document)" };
    const yamlIssues = [...doc.errors, ...doc.warnings];
    if (yamlIssues.length) {
      for (const e of yamlIssues)
        problems.push(`${file}:${e.linePos?.[0]?.line ?? "?"}: YAML: ${e.message.split("\n")[0].replace(/ at line \d+, column \d+:?$/, "")}`);
      continue;
    }
    const obj = doc.toJS({ maxAliasCount: 100 });
    if (obj === null || obj === undefined) continue; // an empty document, as kubectl skips it
    o.obj = obj;
    o.label = labelOf(obj);
    if (!isPlainObject(obj)) {
      problem(o, [], "a document must be one object (a mapping)");
      continue;
    }
    if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") {
      problem(o, [], "apiVersion and kind are required strings");
      continue;
    }
    const cls = await classOf(obj.apiVersion, obj.kind);
    if (!cls) {
      problem(o, ["kind"], `unknown kind: kubernetes-models ${modelsVersion} has no ${obj.kind} in ${obj.apiVersion} (a typo, or a custom resource, which this check refuses)`);
      continue;
    }
    checkSchema(o, cls);
    objects.push(o);
  }
}

const find = (kind, ns, name) =>
  objects.some((x) => x.obj.kind === kind && x.obj.metadata?.name === name && (x.obj.metadata?.namespace ?? "default") === ns);
const clusterScoped = new Set(["Namespace", "Node", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "PriorityClass", "StorageClass", "CustomResourceDefinition", "RuntimeClass", "IngressClass", "CSIDriver", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "APIService"]);
for (const o of objects) {
  const ns = o.obj.metadata?.namespace;
  if (clusterScoped.has(o.obj.kind)) {
    if (ns) problem(o, ["metadata", "namespace"], `a ${o.obj.kind} has no namespace`);
  } else if (!ns) {
    problem(o, ["metadata"], "no metadata.namespace: it would land in whatever namespace kubectl is pointed at");
  } else if (!wellKnownNamespaces.has(ns) && !objects.some((x) => x.obj.kind === "Namespace" && x.obj.metadata?.name === ns)) {
    problem(o, ["metadata", "namespace"], `namespace ${ns} is not created by these files`);
  }
  checkPodTemplate(o, find);
}

if (problems.length) {
  // By file, then line (the order of files kept), as an editor would walk them.
  const fileOrder = (p) => files.findIndex((f) => p.startsWith(path.relative(process.cwd(), path.resolve(f)) || f));
  const lineNo = (p) => Number(/^[^:]*:(\d+):/.exec(p)?.[1] ?? 0);
  problems.sort((a, b) => fileOrder(a) - fileOrder(b) || lineNo(a) - lineNo(b));
  for (const p of problems) console.error(p);
  console.error(`validate.mjs: ${problems.length} problem(s) in ${files.length} file(s) (kubernetes-models ${modelsVersion})`);
  process.exit(1);
}
const kinds = objects.map((o) => o.label).join(", ");
console.log(`validate.mjs: ${objects.length} object(s) in ${files.length} file(s) valid against kubernetes-models ${modelsVersion}: ${kinds}`);

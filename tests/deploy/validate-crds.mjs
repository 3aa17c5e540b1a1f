// Validates custom resources (Istio, prometheus-operator) with the kubernetes-models validators,
// which are generated from each project's CRD schemas. Reads a JSON array of objects on stdin and
// prints a JSON array of problems: {index, kind, name, error}. An object whose kind has no model
// is a problem too, so nothing passes unchecked. Used by tests/deploy/test_kubernetes.py.
import { readFileSync } from "node:fs";

const PACKAGES = [
  [/\.istio\.io$/, "@kubernetes-models/istio"],
  [/^monitoring\.coreos\.com$/, "@kubernetes-models/prometheus-operator"],
];

async function model(apiVersion, kind) {
  const [group, version] = apiVersion.split("/");
  const found = PACKAGES.find(([pattern]) => pattern.test(group));
  if (!found || !version) return null;
  try {
    const module = await import(`${found[1]}/${group}/${version}/${kind}`);
    return module[kind] ?? null;
  } catch {
    return null;
  }
}

const objects = JSON.parse(readFileSync(0, "utf8"));
const problems = [];
for (const [index, object] of objects.entries()) {
  const name = object?.metadata?.name ?? "";
  const Model = await model(String(object.apiVersion), String(object.kind));
  if (Model === null) {
    problems.push({ index, kind: object.kind, name, error: `no model for ${object.apiVersion} ${object.kind}` });
    continue;
  }
  try {
    new Model(object).validate();
  } catch (error) {
    problems.push({ index, kind: object.kind, name, error: String(error.message ?? error) });
  }
}
process.stdout.write(JSON.stringify(problems));

// Validates a Kubernetes manifest (one or more YAML documents) against the Kubernetes API's
// OpenAPI schemas, as kubernetes-models carries them: each document becomes the model of its
// apiVersion and kind, whose validate() checks every field's type, enum and required keys.
//
//   node k8s_manifest_check.mjs MANIFEST.yaml
//
// Prints "ok <kind>/<name>" per document; exits 1 naming the first document that fails. Run
// with NODE_PATH=.deps/npm/node_modules (scripts/install-deps.sh installs both packages).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(process.env.NODE_PATH + "/");
const YAML = require("yaml");

const path = process.argv[2];
const documents = YAML.parseAllDocuments(readFileSync(path, "utf8"));
let failed = false;
for (const document of documents) {
  if (document.errors.length > 0) {
    console.error(`${path}: not YAML: ${document.errors[0].message}`);
    process.exit(1);
  }
  const object = document.toJS();
  if (object === null) continue;
  const where = `${object.kind}/${object.metadata?.name}`;
  // "apps/v1" -> kubernetes-models/apps/v1; the core group "v1" -> kubernetes-models/v1.
  let models;
  try {
    models = require(`kubernetes-models/${object.apiVersion}`);
  } catch {
    console.error(`${path}: ${where}: unknown apiVersion ${object.apiVersion}`);
    process.exit(1);
  }
  if (typeof models[object.kind] !== "function") {
    console.error(`${path}: ${where}: ${object.apiVersion} has no kind ${object.kind}`);
    process.exit(1);
  }
  try {
    new models[object.kind](object).validate();
    console.log(`ok ${where}`);
  } catch (error) {
    console.error(`${path}: ${where}: ${error.message}`);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);

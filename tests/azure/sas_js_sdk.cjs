// Lease actions under shared access signatures made and used by the official
// JavaScript SDK (@azure/storage-blob, installed into bench/node_modules by
// `make azurite`), for tests/azure/test_azure_sas_js.py. Reads
// {url, account, key, cases: [...]} as JSON on stdin; for each case sets the
// resource up with the account key, makes the SAS with the SDK's own
// generate*SASQueryParameters, runs the lease action with it, and prints one
// JSON line: {id, sas, ok} or {id, sas, ok: false, status, code}.
"use strict";
const path = require("path");
const blob = require(path.join(__dirname, "..", "..", "bench", "node_modules", "@azure", "storage-blob"));

const HELD = "ca761232-ed42-11ce-bacd-00aa0057b223";
const NEXT = "3c7e72eb-b430-4526-bc53-d8ecef03798f";
const OPTIONS = { retryOptions: { maxTries: 1 } };

function makeSas(c, credential) {
  const expiresOn = new Date(Date.now() + (c.expiresIn ?? 3600) * 1000);
  const startsOn = c.startsIn !== undefined ? new Date(Date.now() + c.startsIn * 1000) : undefined;
  const common = {
    expiresOn, startsOn, ipRange: c.ip ? { start: c.ip } : undefined, protocol: c.protocol, version: c.version,
  };
  if (c.kind === "account") {
    return blob.generateAccountSASQueryParameters({
      ...common, services: "b", resourceTypes: c.resourceTypes ?? (c.blob ? "o" : "c"),
      permissions: blob.AccountSASPermissions.parse(c.letters),
    }, credential).toString();
  }
  if (c.kind === "policy") {
    return blob.generateBlobSASQueryParameters({
      containerName: c.container, blobName: c.blob ?? undefined, identifier: "lease-policy", version: c.version,
    }, credential).toString();
  }
  if (c.kind === "container" || !c.blob) {
    return blob.generateBlobSASQueryParameters({
      ...common, containerName: c.container, permissions: blob.ContainerSASPermissions.parse(c.letters),
    }, credential).toString();
  }
  return blob.generateBlobSASQueryParameters({
    ...common, containerName: c.container, blobName: c.blob, permissions: blob.BlobSASPermissions.parse(c.letters),
  }, credential).toString();
}

async function act(lease, action) {
  if (action === "acquire") return lease.acquireLease(15);
  if (action === "renew") return lease.renewLease();
  if (action === "change") return lease.changeLease(NEXT);
  if (action === "release") return lease.releaseLease();
  return lease.breakLease(0);
}

async function run(input, c) {
  const credential = new blob.StorageSharedKeyCredential(input.account, input.key);
  const base = `${input.url}/${input.account}`;
  const service = new blob.BlobServiceClient(base, credential, OPTIONS);
  const container = service.getContainerClient(c.container);
  await container.create();
  let keyed = container;
  if (c.blob) {
    keyed = container.getBlockBlobClient(c.blob);
    await keyed.upload("payload", 7);
  }
  if (c.kind === "policy") {
    await container.setAccessPolicy(undefined, [{
      id: "lease-policy", accessPolicy: { permissions: c.letters, expiresOn: new Date(Date.now() + 3600 * 1000) },
    }]);
  }
  if (c.action !== "acquire") await keyed.getBlobLeaseClient(HELD).acquireLease(-1);
  const sas = makeSas(c, credential);
  let target = new blob.ContainerClient(`${base}/${c.container}?${sas}`, new blob.AnonymousCredential(), OPTIONS);
  if (c.blob) target = new blob.BlobClient(`${base}/${c.container}/${encodeURIComponent(c.blob)}?${sas}`,
    new blob.AnonymousCredential(), OPTIONS);
  try {
    await act(target.getBlobLeaseClient(HELD), c.action);
    return { id: c.id, sas, ok: true };
  } catch (err) {
    if (err.statusCode === undefined) throw err;
    return { id: c.id, sas, ok: false, status: err.statusCode, code: err.code ?? err.details?.errorCode };
  }
}

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const input = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  for (const c of input.cases) {
    process.stdout.write(JSON.stringify(await run(input, c)) + "\n");
  }
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});

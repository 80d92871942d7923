// Uploads in blocks, Put Block / Put Block List / Get Block List, Copy Blob
// and Append Block around a leased blob, by the official JavaScript SDK
// (@azure/storage-blob, installed into bench/node_modules by `make azurite`),
// for tests/azure/test_azure_blocks_js.py. Reads {url, account, key, cases}
// as one JSON line on stdin; sets every case up (container, blob, lease in
// the state the case names), prints {"ready": true} and waits for one more
// line (the test may move the server's clock meanwhile), then acts each case
// and prints one JSON line: {id, ok, ...what it saw} or {id, ok: false,
// status, code, ...what it saw after the refusal}.
"use strict";
const crypto = require("crypto");
const path = require("path");
const readline = require("readline");
const { Readable } = require("stream");
const blob = require(path.join(__dirname, "..", "..", "bench", "node_modules", "@azure", "storage-blob"));

const MIB = 1 << 20;
const OPTIONS = { retryOptions: { maxTries: 1 } };
const WRONG = "3c7e72eb-b430-4526-bc53-d8ecef03798f";

// ``size`` bytes: SHA-256 of "seed:0", "seed:1", ... one after another (the test computes the same).
function content(seed, size) {
  const parts = [];
  for (let i = 0; i * 32 < size; i++) parts.push(crypto.createHash("sha256").update(`${seed}:${i}`).digest());
  return Buffer.concat(parts).subarray(0, size);
}

function blockId(n) {
  return Buffer.from(String(n).padStart(8, "0")).toString("base64");
}

async function digestOf(client) {
  const body = await client.downloadToBuffer();
  return { sha256: crypto.createHash("sha256").update(body).digest("hex"), size: body.length };
}

async function textOf(client) {
  return (await client.downloadToBuffer()).toString("utf8");
}

async function blockList(client, kind = "all") {
  const list = await client.getBlockList(kind);
  const pick = (blocks) => (blocks ?? []).map((b) => [b.name, b.size]);
  return { committed: pick(list.committedBlocks), uncommitted: pick(list.uncommittedBlocks) };
}

function refusal(err) {
  if (err.statusCode === undefined) throw err;
  return { ok: false, status: err.statusCode, code: err.code ?? err.details?.errorCode };
}

// The lease id a case sends: "none" (no lease on the blob), "missing", "right", "wrong".
function leaseIdFor(c, held) {
  if (c.lease === "right") return held;
  if (c.lease === "wrong") return WRONG;
  return undefined;
}

async function setUp(service, c) {
  const container = service.getContainerClient(c.container);
  await container.create();
  const target = container.getBlockBlobClient("target");
  const state = { container, target };
  if (c.kind === "upload") {
    if (c.lease !== "none") {
      await target.upload("old", 3);
      state.held = (await target.getBlobLeaseClient().acquireLease(-1)).leaseId;
    }
    return state;
  }
  if (c.kind === "cell") {
    // Put Block List's block is staged before the blob (and its lease) exists.
    if (c.op === "commit") await target.stageBlock(blockId(1), "new", 3);
    if (c.op === "append") {
      state.append = container.getAppendBlobClient("target");
      await state.append.create();
    } else {
      await target.upload("base", 4);
    }
    if (c.op.startsWith("copy")) await container.getBlockBlobClient("source").upload("copied", 6);
    const lease = target.getBlobLeaseClient();
    state.held = (await lease.acquireLease(c.setup === "expired" ? 15 : -1)).leaseId;
    if (c.setup === "breaking") await lease.breakLease(60);
    if (c.setup === "broken") await lease.breakLease(0);
  }
  return state;
}

async function upload(c, state) {
  const { target, held } = state;
  const leaseId = leaseIdFor(c, held);
  const conditions = leaseId ? { leaseId } : undefined;
  const data = content(c.seed, c.size);
  let result = { ok: true };
  try {
    if (c.method === "data") {
      await target.uploadData(data, { blockSize: MIB, maxSingleShotSize: MIB, concurrency: 2, conditions });
    } else {
      // A stream of unknown length: the SDK is told no size.
      async function* pieces() {
        for (let at = 0; at < data.length; at += 100_000) yield data.subarray(at, at + 100_000);
      }
      await target.uploadStream(Readable.from(pieces()), MIB, 2, { conditions });
    }
  } catch (err) {
    result = refusal(err);
  }
  const props = await target.getProperties();
  return { ...result, ...(await digestOf(target)), ...(await blockList(target)), leaseState: props.leaseState,
    text: props.contentLength < 100 ? await textOf(target) : undefined };
}

// Stage, list, commit, list by kind, reorder, as a client that manages its own blocks does.
async function byHand(c, state) {
  const { target } = state;
  await target.stageBlock(blockId(1), "hello ", 6);
  await target.stageBlock(blockId(2), "world", 5);
  const staged = await blockList(target, "all");
  await target.commitBlockList([blockId(2), blockId(1)]);
  const first = await textOf(target);
  await target.stageBlock(blockId(3), "!", 1);
  const committed = await blockList(target, "committed");
  const uncommitted = await blockList(target, "uncommitted");
  await target.commitBlockList([blockId(1), blockId(3)]);  // one committed block, one uncommitted
  return { ok: true, staged, first, committed, uncommitted, after: await blockList(target, "all"),
    text: await textOf(target) };
}

async function cell(c, state) {
  const { container, target, held } = state;
  const leaseId = leaseIdFor(c, held);
  const conditions = leaseId ? { leaseId } : undefined;
  const source = container.getBlockBlobClient("source").url;
  let result = { ok: true };
  try {
    if (c.op === "stage") await target.stageBlock(blockId(1), "new", 3, { conditions });
    else if (c.op === "commit") await target.commitBlockList([blockId(1)], { conditions });
    else if (c.op === "list") result.list = await target.getBlockList("all", { conditions }).then(() => "listed");
    else if (c.op === "copy-sync") result.copy = (await target.syncCopyFromURL(source, { conditions })).copyStatus;
    else if (c.op === "copy-begin") {
      const poller = await target.beginCopyFromURL(source, { conditions, intervalInMs: 50 });
      result.copy = (await poller.pollUntilDone()).copyStatus;
    } else if (c.op === "append") await state.append.appendBlock("more", 4, { conditions });
  } catch (err) {
    result = refusal(err);
  }
  const props = await target.getProperties();
  const seen = { ...result, text: await textOf(target), leaseState: props.leaseState };
  if (c.op !== "append") seen.blocks = await blockList(target);
  return seen;
}

async function main() {
  const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const input = JSON.parse((await lines.next()).value);
  const credential = new blob.StorageSharedKeyCredential(input.account, input.key);
  const service = new blob.BlobServiceClient(`${input.url}/${input.account}`, credential, OPTIONS);
  const states = [];
  for (const c of input.cases) states.push(await setUp(service, c));
  process.stdout.write(JSON.stringify({ ready: true }) + "\n");
  await lines.next();
  for (const [n, c] of input.cases.entries()) {
    const act = { upload, "by-hand": byHand, cell }[c.kind];
    process.stdout.write(JSON.stringify({ id: c.id, ...(await act(c, states[n])) }) + "\n");
  }
}

main().then(() => process.exit(0)).catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});

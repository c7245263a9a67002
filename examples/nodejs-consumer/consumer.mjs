#!/usr/bin/env node
// An informer-bus consumer in Node.js: reads one resource's shard streams the way docs/wire.md
// says and prints one JSON line per delta, in the shape of `informer-bus subscribe -o json`.
//
//   node consumer.mjs --redis-url redis://127.0.0.1:6390/0 --resource pods --from-beginning
//
// Start positions (one of them; default --from-now):
//   --from-beginning  every delta still on the streams (XREAD from 0-0)
//   --snapshot        the known state first (each shard's `objects` hash, as Added deltas with
//                     "initial": true), then the stream after it: what a new reader that must
//                     not miss an object does (wire.md, "Reading a shard from scratch")
//   --from ID         the deltas after entry ID on every shard
//   --from-now        only deltas published after the start
// Other options: --prefix (default ib), --shard-count N (default: the layout hash), --count N
// (stop after N deltas), --block-ms N (how long one XREAD waits, default 2000).
// Exit status: 0 done or stopped, 1 Redis failed, 2 usage error (one line on stderr).

import Redis from "ioredis";
import { decodeEnvelope, WireDecodeError } from "./envelope.mjs";

const PROGRAM = "informer-bus-consumer";
const BATCH = 500;

class UsageError extends Error {}

function parseArgs(argv) {
  const options = { prefix: "ib", start: "$", snapshot: false, count: null, shardCount: null, blockMs: 2000, redisUrl: null, resource: null };
  const value = (i, flag) => {
    if (i + 1 >= argv.length) throw new UsageError(`${flag} needs a value`);
    return argv[i + 1];
  };
  const positive = (text, flag) => {
    if (!/^[1-9][0-9]*$/.test(text)) throw new UsageError(`${flag} must be a positive integer, got ${JSON.stringify(text)}`);
    return Number(text);
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    switch (flag) {
      case "--redis-url": options.redisUrl = value(i++, flag); break;
      case "--resource": options.resource = value(i++, flag); break;
      case "--prefix": options.prefix = value(i++, flag); break;
      case "--from-beginning": options.start = "0-0"; break;
      case "--from-now": options.start = "$"; break;
      case "--snapshot": options.snapshot = true; break;
      case "--from": {
        const id = value(i++, flag);
        if (!/^[0-9]+(-[0-9]+)?$/.test(id)) throw new UsageError(`invalid stream entry ID ${JSON.stringify(id)}: expected MILLISECONDS-SEQUENCE`);
        options.start = id;
        break;
      }
      case "--count": options.count = positive(value(i++, flag), flag); break;
      case "--shard-count": options.shardCount = positive(value(i++, flag), flag); break;
      case "--block-ms": options.blockMs = positive(value(i++, flag), flag); break;
      default: throw new UsageError(`unknown argument ${JSON.stringify(flag)}`);
    }
  }
  if (!options.redisUrl) throw new UsageError("--redis-url is required");
  if (!options.resource) throw new UsageError("--resource is required (a resource id: pods, deployments.apps, pods@shop)");
  for (const [what, name] of [["prefix", options.prefix], ["resource", options.resource]]) {
    if (!name || /[{}\s]/.test(name)) throw new UsageError(`${what} must be non-empty, without braces or whitespace`);
  }
  return options;
}

// --- key names (wire.md, "Keys") -------------------------------------------------------------

const resourceKey = (o, suffix) => `${o.prefix}:{${o.resource}}:${suffix}`;
const shardKey = (o, shard, suffix) => `${o.prefix}:{${o.resource}:${shard}}:${suffix}`;

/** The shard count: the layout hash's shard_count, else the highest shard number of a
 *  checkpoint or deltas key plus one (reflectors from before layouts). */
async function shardCount(redis, o) {
  const recorded = await redis.hget(resourceKey(o, "layout"), "shard_count");
  if (recorded !== null) return Number(recorded);
  const escaped = `${o.prefix}:{${o.resource}:*}:*`.replace(/[?[\]\\^]/g, "\\$&");
  let highest = -1;
  const pattern = new RegExp(`^${reEscape(o.prefix)}:\\{${reEscape(o.resource)}:(0|[1-9][0-9]*)\\}:(checkpoint|deltas)$`);
  for await (const keys of redis.scanStream({ match: escaped, count: 1000 })) {
    for (const key of keys) {
      const m = pattern.exec(key);
      if (m) highest = Math.max(highest, Number(m[1]));
    }
  }
  return highest + 1;
}

function reEscape(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

// --- output (the shape of `informer-bus subscribe -o json`) ----------------------------------

function jsonLine(stream, shard, id, decoded, type, initial) {
  const h = decoded.header;
  // The object's text is printed as it came (no JSON.parse/stringify round trip, which would
  // round integers above 2^53), unless it holds a line break, which would split the line.
  const object = /[\r\n]/.test(decoded.objectText) ? JSON.stringify(decoded.object) : decoded.objectText;
  const s = JSON.stringify;
  return `{"stream":${s(stream)},"shard":${shard},"id":${s(id)},"type":${s(type)},"key":${s(h.k)},` +
    `"resourceVersion":${s(h.rv)},"uid":${s(h.uid)},"observedAt":${s(h.ts)},"tombstone":${h.tomb},` +
    `"object":${object},"initial":${initial}}\n`;
}

function idOrder(id) {
  const [ms, seq = "0"] = id.split("-");
  return [BigInt(ms), BigInt(seq)];
}

function compareIds(a, b) {
  const [x, y] = [idOrder(a), idOrder(b)];
  return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0;
}

function warn(message) {
  process.stderr.write(`${PROGRAM}: ${message}\n`);
}

// --- reading ---------------------------------------------------------------------------------

async function main() {
  let options;
  try {
    options = parseArgs(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`${PROGRAM}: error: ${error.message}\n`);
    return 2;
  }
  const redis = new Redis(options.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 3, retryStrategy: () => null });
  redis.on("error", () => {}); // reported by the failing command instead
  let stopping = false;
  for (const signal of ["SIGINT", "SIGTERM"]) {
    process.on(signal, () => { stopping = true; redis.disconnect(); });
  }
  try {
    await redis.connect();
    return await consume(redis, options, () => stopping);
  } catch (error) {
    if (stopping) return 0;
    process.stderr.write(`${PROGRAM}: error: Redis at ${options.redisUrl.replace(/\/\/[^@/]*@/, "//***@")}: ${error.message}\n`);
    return 1;
  } finally {
    redis.disconnect();
  }
}

async function consume(redis, o, stopped) {
  const count = o.shardCount ?? (await shardCount(redis, o));
  if (!count) {
    process.stderr.write(`${PROGRAM}: error: no reflector has published ${o.resource} under prefix ${o.prefix} (no ${resourceKey(o, "layout")}, no shard keys)\n`);
    return 2;
  }
  const streams = Array.from({ length: count }, (_, shard) => shardKey(o, shard, "deltas"));
  const shardOf = new Map(streams.map((stream, shard) => [stream, shard]));
  const positions = new Map();
  let printed = 0;
  const emit = (line) => {
    process.stdout.write(line);
    printed += 1;
    return o.count !== null && printed >= o.count;
  };

  if (o.snapshot) {
    // Known state and stream position of each shard in one MULTI: the reflector writes both in
    // one script, so the snapshot is exactly the state after the last entry.
    for (const [shard, stream] of streams.entries()) {
      const [[e1, objects], [e2, last]] = await redis.multi()
        .hgetallBuffer(shardKey(o, shard, "objects"))
        .xrevrange(stream, "+", "-", "COUNT", 1)
        .exec();
      if (e1 || e2) throw e1 || e2;
      const lastId = last.length ? last[0][0] : "0-0";
      positions.set(stream, lastId);
      for (const key of Object.keys(objects).sort(byCodePoint)) {
        let decoded;
        try {
          decoded = decodeEnvelope(objects[key]);
        } catch (error) {
          if (!(error instanceof WireDecodeError)) throw error;
          warn(`skipping undecodable known state ${key} of ${shardKey(o, shard, "objects")}: ${error.message}`);
          continue;
        }
        if (emit(jsonLine(stream, shard, lastId, decoded, "Added", true))) return 0;
      }
    }
  } else if (o.start === "$") {
    // "$" is resolved once per shard here: passing "$" to every XREAD would skip what arrives
    // on one shard while the others' entries are being printed.
    for (const stream of streams) {
      const last = await redis.xrevrange(stream, "+", "-", "COUNT", 1);
      positions.set(stream, last.length ? last[0][0] : "0-0");
    }
  } else {
    for (const stream of streams) positions.set(stream, o.start);
  }

  while (!stopped()) {
    const reply = await redis.xreadBuffer("COUNT", BATCH, "BLOCK", o.blockMs, "STREAMS", ...streams, ...streams.map((s) => positions.get(s)));
    if (!reply) continue;
    // One read's entries of every shard, merged by entry ID (Redis append time): each shard's
    // own order is kept exactly, the order across shards is best effort.
    const entries = [];
    for (const [rawStream, batch] of reply) {
      const stream = rawStream.toString();
      for (const [rawId, fields] of batch) entries.push({ stream, id: rawId.toString(), fields });
    }
    entries.sort((a, b) => compareIds(a.id, b.id));
    for (const { stream, id, fields } of entries) {
      positions.set(stream, id);
      const shard = shardOf.get(stream);
      let decoded;
      try {
        if (fields.length !== 2 || fields[0].toString() !== "d") {
          throw new WireDecodeError(fields.length ? "a stream entry must have exactly one field 'd'" : "stream entry has no payload");
        }
        decoded = decodeEnvelope(fields[1]);
      } catch (error) {
        if (!(error instanceof WireDecodeError)) throw error;
        warn(`skipping undecodable entry ${id} on ${stream}: ${error.message}`);
        continue;
      }
      if (emit(jsonLine(stream, shard, id, decoded, decoded.header.t, false))) return 0;
    }
  }
  return 0;
}

// Keys sort like Python's sorted() on str: by code point, not by UTF-16 unit.
function byCodePoint(a, b) {
  const x = Array.from(a), y = Array.from(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d) return d;
  }
  return x.length - y.length;
}

process.exitCode = await main();

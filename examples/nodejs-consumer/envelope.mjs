// Decoding one informer-bus envelope (docs/wire.md, "The envelope"), as strictly as the
// Python decoder: an entry that breaks any rule is refused with a WireDecodeError saying why,
// never half-read into a cache. The envelope is UTF-8 JSON: versions 2 and 3 are a header
// object, one line feed, and the object (or `null`); version 1 is one JSON document.

export const MAX_BYTES = 4 * 1024 * 1024;
export const DELTA_TYPES = new Set(["Added", "Updated", "Deleted", "Replaced", "Sync"]);
const HEADER_FIELDS = ["v", "t", "k", "ns", "rv", "uid", "ts", "tomb", "l", "f"];
const V1_FIELDS = ["v", "t", "k", "rv", "uid", "ts", "tomb", "o"];
const ENTRY_ID = /^[0-9]+-[0-9]+$/;
const utf8 = new TextDecoder("utf-8", { fatal: true });

export class WireDecodeError extends Error {}

function fail(message) {
  throw new WireDecodeError(message);
}

function isPlainObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isStringMap(value) {
  return isPlainObject(value) && Object.values(value).every((v) => typeof v === "string");
}

function sameKeys(doc, names) {
  const keys = Object.keys(doc);
  return keys.length === names.length && names.every((name) => Object.hasOwn(doc, name));
}

function sameStringMap(a, b) {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && b[k] === a[k]);
}

/** The namespace part of a cache key ("" for a cluster-scoped key); fails for a malformed key. */
export function namespaceOf(key) {
  if (typeof key !== "string" || key === "") fail(`key must be a non-empty string, got ${JSON.stringify(key)}`);
  const parts = key.split("/");
  if (parts.length > 2 || parts.some((part) => part === "")) fail(`key ${JSON.stringify(key)} must be 'namespace/name' or 'name'`);
  return parts.length === 2 ? parts[0] : "";
}

function checkMove(header) {
  const mv = header.mv;
  if (!isPlainObject(mv)) fail("a v3 header must carry a move ('mv')");
  const shardOk = (s) => Number.isInteger(s) && s >= 0;
  if (sameKeys(mv, ["to"]) && shardOk(mv.to)) {
    if (header.t !== "Deleted" || header.tomb) fail("the outgoing half of a move must be a Deleted delta that is no tombstone");
    return { toShard: mv.to };
  }
  if (sameKeys(mv, ["from", "id"]) && shardOk(mv.from) && typeof mv.id === "string" && ENTRY_ID.test(mv.id)) {
    if (header.t !== "Added") fail("the incoming half of a move must be an Added delta");
    return { fromShard: mv.from, fromId: mv.id };
  }
  return fail(`invalid move ${JSON.stringify(mv)}`);
}

function checkHeader(header, version, hasObject) {
  const names = version === 3 ? [...HEADER_FIELDS, "mv"] : HEADER_FIELDS;
  if (!isPlainObject(header) || !sameKeys(header, names)) {
    fail(`v${version} header fields wrong: expected exactly ${names.join(", ")}`);
  }
  if (!DELTA_TYPES.has(header.t)) fail(`unknown delta type ${JSON.stringify(header.t)}`);
  if (header.ns !== namespaceOf(header.k)) fail(`namespace ${JSON.stringify(header.ns)} is not the key's`);
  if (typeof header.rv !== "string") fail("rv must be a string");
  if (typeof header.uid !== "string") fail("uid must be a string");
  if (typeof header.ts !== "number" || !Number.isFinite(header.ts)) fail("ts must be finite unix seconds");
  if (typeof header.tomb !== "boolean") fail("tomb must be a boolean");
  if (!isStringMap(header.l)) fail("l (labels) must map strings to strings");
  if (!isStringMap(header.f)) fail("f (selectable fields) must map strings to strings");
  if (header.tomb && header.t !== "Deleted") fail("a tombstone must have type Deleted");
  if (!hasObject) {
    if (!header.tomb) fail(`a ${header.t} delta needs an object (only a tombstone may lack one)`);
    if (header.rv || header.uid || Object.keys(header.l).length) fail("a tombstone without its last object has no rv, uid or labels");
  }
  return version === 3 ? checkMove(header) : null;
}

/** Fails unless `obj`'s metadata agrees with the header it came with. */
function checkAgreement(obj, header) {
  if (!isPlainObject(obj)) fail("the object must be a JSON object");
  const md = obj.metadata;
  if (!isPlainObject(md)) fail("the object has no metadata");
  const { name, namespace } = md;
  if (typeof name !== "string" || name === "") fail("metadata.name must be a non-empty string");
  if (namespace && typeof namespace !== "string") fail("metadata.namespace must be a string");
  const key = namespace ? `${namespace}/${name}` : name;
  if (key !== header.k) fail(`key ${JSON.stringify(header.k)} is not the object's ${JSON.stringify(key)}`);
  const rv = Object.hasOwn(md, "resourceVersion") ? md.resourceVersion : "";
  const uid = Object.hasOwn(md, "uid") ? md.uid : "";
  if (rv !== header.rv) fail(`rv ${JSON.stringify(header.rv)} is not the object's ${JSON.stringify(rv)}`);
  if (uid !== header.uid) fail(`uid ${JSON.stringify(header.uid)} is not the object's`);
  const labels = md.labels === undefined || md.labels === null ? {} : md.labels;
  if (!isStringMap(labels) || !sameStringMap(labels, header.l)) fail("labels disagree with the object's");
}

/**
 * Decode one envelope (a Buffer, as Redis stores it). Returns
 * `{version, header, object, objectText, move}`: `header` has the version 2 fields whatever the
 * version (a version 1 document's are derived from it), `object` is the parsed object (null for
 * a tombstone without its last state), `objectText` its JSON text as it was on the wire (for
 * printing it without a lossy re-serialisation), `move` `{toShard}` / `{fromShard, fromId}` for
 * a move's halves (version 3), else null. Throws WireDecodeError, and nothing else.
 */
export function decodeEnvelope(data) {
  try {
    return decode(data);
  } catch (error) {
    if (error instanceof WireDecodeError) throw error;
    throw new WireDecodeError(`malformed envelope: ${error.message}`);
  }
}

function decode(data) {
  if (data.length > MAX_BYTES) fail(`envelope is ${data.length} bytes, over the ${MAX_BYTES}-byte limit`);
  const text = utf8.decode(data);
  const version = text.startsWith('{"v":2,') ? 2 : text.startsWith('{"v":3,') ? 3 : 1;
  if (version === 1) return decodeV1(text);
  const cut = text.indexOf("\n");
  if (cut < 0) fail(`v${version} envelope has no line feed between its header and its object`);
  const header = JSON.parse(text.slice(0, cut));
  const objectText = text.slice(cut + 1);
  const hasObject = objectText !== "null";
  const move = checkHeader(header, version, hasObject);
  let object = null;
  if (hasObject) {
    if (!(objectText.startsWith("{") && objectText.endsWith("}"))) fail("the object must be one JSON object with nothing around it");
    object = JSON.parse(objectText);
    checkAgreement(object, header);
  }
  return { version, header, object, objectText, move };
}

function decodeV1(text) {
  if (!(text.startsWith("{") && text.endsWith("}"))) fail("envelope must be one JSON object with nothing around it");
  const doc = JSON.parse(text);
  if (doc.v === 2 || doc.v === 3) fail(`a v${doc.v} envelope must start with {"v":${doc.v}, and have its object after a line feed`);
  if (doc.v !== 1) fail(`unsupported envelope version ${JSON.stringify(doc.v)}; this consumer reads 1, 2 and 3`);
  if (!sameKeys(doc, V1_FIELDS)) fail(`v1 envelope fields wrong: expected exactly ${V1_FIELDS.join(", ")}`);
  const obj = doc.o;
  const labels = isPlainObject(obj) && isPlainObject(obj.metadata) && isPlainObject(obj.metadata.labels) ? obj.metadata.labels : {};
  const header = { v: 1, t: doc.t, k: doc.k, ns: namespaceOf(doc.k), rv: doc.rv, uid: doc.uid, ts: doc.ts, tomb: doc.tomb, l: labels, f: {} };
  checkHeader({ ...header, v: 2 }, 2, obj !== null);
  if (obj !== null) checkAgreement(obj, header);
  return { version: 1, header, object: obj, objectText: obj === null ? "null" : JSON.stringify(obj), move: null };
}

/**
 * Redis Cluster's key → slot mapping (CRC16/XMODEM of the key's hash tag, mod 16384),
 * to group decisions by the node that serves them, and that grouping: one call per
 * node and at most `maxBatch` items, for the batcher and for settlements alike.
 */

/** The node name of a single Redis (not a Cluster). */
export const SINGLE_NODE = ''

const table = new Uint16Array(256)
for (let byte = 0; byte < 256; byte++) {
  let crc = byte << 8
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  table[byte] = crc
}

/** The part of `key` that is hashed: the text between the first `{` and the next `}`, when not empty. */
export function hashTag (key: string): string {
  const open = key.indexOf('{')
  if (open === -1) return key
  const close = key.indexOf('}', open + 1)
  if (close === -1 || close === open + 1) return key
  return key.slice(open + 1, close)
}

/** The cluster slot (0–16383) of `key`. */
export function clusterSlot (key: string): number {
  let crc = 0
  for (const byte of Buffer.from(hashTag(key))) {
    crc = ((crc << 8) & 0xffff) ^ (table[((crc >> 8) ^ byte) & 0xff] as number)
  }
  return crc % 16384
}

/**
 * Splits `items` into the calls to make: grouped by node (`nodeOf`; undefined: one
 * node, `SINGLE_NODE`), in order within a node, then in chunks of at most
 * `maxBatch`. Calls `each(chunk, node)` per call, nodes in their first item's order.
 */
export function chunksByNode<T> (items: readonly T[], nodeOf: ((item: T) => string) | undefined, maxBatch: number, each: (chunk: T[], node: string) => void): void {
  for (const [node, group] of groupByNode(items, nodeOf)) {
    for (let start = 0; start < group.length; start += maxBatch) each(group.slice(start, start + maxBatch), node)
  }
}

/** `items` grouped by node, in order. */
function groupByNode<T> (items: readonly T[], nodeOf: ((item: T) => string) | undefined): Iterable<[string, readonly T[]]> {
  if (nodeOf === undefined) return [[SINGLE_NODE, items]]
  const groups = new Map<string, T[]>()
  for (const item of items) {
    const node = nodeOf(item)
    const group = groups.get(node)
    if (group === undefined) groups.set(node, [item])
    else group.push(item)
  }
  return groups.entries()
}

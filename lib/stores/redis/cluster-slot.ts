/**
 * Redis Cluster's key → slot mapping (CRC16/XMODEM of the key's hash tag, mod 16384),
 * to group decisions by the node that serves them.
 */

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

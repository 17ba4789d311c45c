/**
 * How the scripts' replies are read: every number comes back as a string
 * (scripts/*.lua), or as that string's bytes (a Buffer) when the store calls a
 * client's Buffer variant of the command (scripts.ts).
 */

/** Parses a number the script formatted with %.17g (`inf` included), as text or bytes; throws on anything else. */
export function parseNumber (text: unknown): number {
  if (text instanceof Uint8Array) return parseBytes(text)
  if (text === 'inf') return Infinity
  const value = Number(text)
  if (Number.isNaN(value)) throw new Error(`fastify-tollgate: unexpected reply from the Redis script: ${String(text)}`)
  return value
}

/** Most digits read from the bytes: a whole number of 15 digits is exact in a double. */
const MAX_DIGITS = 15
const MINUS = 0x2d
const ZERO = 0x30

/** A whole number's digits (the usual reply), read from the bytes; anything else (a fraction, `inf`) as text. */
function parseBytes (bytes: Uint8Array): number {
  const length = bytes.length
  const negative = bytes[0] === MINUS
  let i = negative ? 1 : 0
  if (length > i && length - i <= MAX_DIGITS) {
    let value = 0
    for (; i < length; i++) {
      const digit = (bytes[i] as number) - ZERO
      if (digit < 0 || digit > 9) break
      value = value * 10 + digit
    }
    if (i === length) return negative ? -value : value
  }
  return parseNumber(String(bytes))
}

/** Whether a reply value is `'1'` (as text or bytes). */
export function isOne (value: unknown): boolean {
  return value === '1' || (value instanceof Uint8Array && value.length === 1 && value[0] === ZERO + 1)
}

/** Whether a reply value is `''` (as text or bytes). */
export function isEmpty (value: unknown): boolean {
  return value === '' || (value instanceof Uint8Array && value.length === 0)
}

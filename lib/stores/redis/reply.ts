/**
 * How the scripts' replies are read: every number comes back as a string
 * (scripts/*.lua), or as that string's bytes (a Buffer) when the store calls a
 * client's Buffer variant of the command (scripts.ts). The consume script answers
 * with one string of values separated by spaces, read in order by a `ReplyReader`.
 */

/** Parses a number the script formatted with %.17g (`inf` included), as text or bytes; throws on anything else. */
export function parseNumber (text: unknown): number {
  if (text instanceof Uint8Array) return parseBytes(text, 0, text.length)
  return parseText(String(text))
}

function parseText (text: string): number {
  if (text === 'inf') return Infinity
  const value = text === '' ? NaN : Number(text)
  if (Number.isNaN(value)) throw new Error(`fastify-tollgate: unexpected reply from the Redis script: ${text}`)
  return value
}

/** Most digits read from the bytes: a whole number of 15 digits is exact in a double. */
const MAX_DIGITS = 15
/** The powers of ten a fraction read from the bytes is divided by: each exact in a double. */
const TENS = Array.from({ length: MAX_DIGITS + 1 }, (_, i) => 10 ** i)
const MINUS = 0x2d
const DOT = 0x2e
const ZERO = 0x30
const SPACE = 0x20

/**
 * The number in `bytes[from, to)`: up to 15 digits with an optional sign and point
 * (the usual reply), read from the bytes; anything else (`inf`, 17 digits) as text.
 * Digits d with k of them after the point are d / 10^k, both exact in a double, so
 * the division rounds once, to the double nearest the text, as `Number` does.
 */
function parseBytes (bytes: Uint8Array, from: number, to: number): number {
  const negative = bytes[from] === MINUS
  let i = negative ? from + 1 : from
  let point = -1
  if (to > i && to - i <= MAX_DIGITS) {
    let value = 0
    for (; i < to; i++) {
      const byte = bytes[i] as number
      const digit = byte - ZERO
      if (digit >= 0 && digit <= 9) value = value * 10 + digit
      else if (byte === DOT && point < 0 && i + 1 < to) point = i
      else break
    }
    if (i === to) {
      if (point >= 0) value /= TENS[to - point - 1] as number
      return negative ? -value : value
    }
  }
  return parseText(Buffer.from(bytes.buffer, bytes.byteOffset + from, to - from).toString('latin1'))
}

/** Reads a reply of values separated by single spaces, in order, from its bytes (text is read as its bytes). */
export class ReplyReader {
  private readonly bytes: Uint8Array
  /** Where the next value starts. */
  private at = 0

  /** Throws on a reply that is neither bytes nor text. */
  constructor (reply: unknown) {
    if (reply instanceof Uint8Array) this.bytes = reply
    else if (typeof reply === 'string') this.bytes = Buffer.from(reply, 'latin1')
    else throw new Error(`fastify-tollgate: unexpected reply from the Redis script: ${typeof reply}`)
  }

  /** The next value, a number; throws when it is none, or when the reply has ended. */
  number (): number {
    const bytes = this.bytes
    const from = this.at
    if (from >= bytes.length) throw new Error('fastify-tollgate: unexpected reply from the Redis script: fewer values than decisions')
    let to = from
    while (to < bytes.length && bytes[to] !== SPACE) to++
    this.at = to + 1
    return parseBytes(bytes, from, to)
  }

  /** Whether the next value is `-` (a bucket absent from Redis), which it then skips. */
  absent (): boolean {
    const at = this.at
    if (this.bytes[at] !== MINUS || (at + 1 < this.bytes.length && this.bytes[at + 1] !== SPACE)) return false
    this.at = at + 2
    return true
  }

  /** Whether the next value is `1`, which it then skips (`allowed`); else reads it, a number. */
  one (): boolean {
    const at = this.at
    if (this.bytes[at] === ZERO + 1 && (at + 1 === this.bytes.length || this.bytes[at + 1] === SPACE)) {
      this.at = at + 2
      return true
    }
    this.number()
    return false
  }

  /** Throws unless every value was read. */
  end (): void {
    if (this.at < this.bytes.length) throw new Error('fastify-tollgate: unexpected reply from the Redis script: more values than decisions')
  }
}

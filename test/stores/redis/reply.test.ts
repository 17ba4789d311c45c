import t from 'tap'
import { parseNumber, ReplyReader } from '../../../lib/stores/redis/reply.js'

t.test('a number reads the same from the bytes (a Buffer variant\'s reply) as from the text', async (t) => {
  for (const text of ['999999999', '-3', '0', '-0', '0.5', '-0.25', '.5', '5.', 'inf', '1e+21', '123456789012345', '1234567890123456',
    '12345.6789012', '0.30000000000000004', '1733160000123.456', '-1733160000123.456']) {
    t.ok(Object.is(parseNumber(Buffer.from(text)), Number(text === 'inf' ? 'Infinity' : text)), `${JSON.stringify(text)}: ${parseNumber(text)}`)
  }
  t.equal(parseNumber(Buffer.from('123456789012345')), 123_456_789_012_345, 'fifteen digits, from the bytes')
  for (const text of ['x', '-', '1x', 'nan', '', '1.2.3']) {
    t.throws(() => parseNumber(Buffer.from(text)), /unexpected reply from the Redis script/, `${JSON.stringify(text)}: no number`)
    t.throws(() => parseNumber(text), /unexpected reply from the Redis script/, `${JSON.stringify(text)}: no number, as text`)
  }
})

t.test('a fraction read from its digits is the double Number reads: digits / 10^k rounds once', async (t) => {
  // Whole numbers of up to 15 digits and a point anywhere: the fast path's whole domain, sampled.
  let seed = 7
  const random = (): number => (seed = (seed * 48271) % 2147483647) / 2147483647
  let differ = 0
  for (let i = 0; i < 20_000; i++) {
    const digits = String(Math.floor(random() * 10 ** (1 + Math.floor(random() * 14))))
    const point = Math.floor(random() * digits.length)
    const text = `${digits.slice(0, point)}.${digits.slice(point)}`
    if (!Object.is(parseNumber(Buffer.from(text)), Number(text))) differ++
  }
  t.equal(differ, 0, '20 000 fractions of up to 15 digits')
})

t.test('a reply reader takes values in order, text or bytes, and nothing else', async (t) => {
  const values = new ReplyReader('1 - 2 -3')
  t.equal(values.one(), true)
  t.equal(values.absent(), true, '- alone: an absent bucket')
  t.equal(values.absent(), false)
  t.equal(values.one(), false, 'a value other than 1 is read, not skipped')
  t.equal(values.absent(), false, '-3 is a number')
  t.equal(values.number(), -3)
  t.doesNotThrow(() => { values.end() })
  const last = new ReplyReader(Buffer.from('-'))
  t.equal(last.absent(), true, 'a dash that ends the reply')
  t.throws(() => new ReplyReader(42), /unexpected reply from the Redis script: number/)
})

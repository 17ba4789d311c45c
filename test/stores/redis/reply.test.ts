import t from 'tap'
import { isEmpty, isOne, parseNumber } from '../../../lib/stores/redis/reply.js'

t.test('a number reads the same from the bytes (a Buffer variant\'s reply) as from the text', async (t) => {
  for (const text of ['999999999', '-3', '0', '0.5', '-0.25', 'inf', '1e+21', '123456789012345', '1234567890123456', '']) {
    t.ok(Object.is(parseNumber(Buffer.from(text)), parseNumber(text)), `${JSON.stringify(text)}: ${parseNumber(text)}`)
  }
  t.equal(parseNumber(Buffer.from('123456789012345')), 123_456_789_012_345, 'fifteen digits, from the bytes')
  for (const text of ['x', '-', '1x', 'nan']) {
    t.throws(() => parseNumber(Buffer.from(text)), /unexpected reply from the Redis script/, `${text}: no number`)
  }
})

t.test('\'1\' and \'\' as text or bytes', async (t) => {
  t.ok(isOne('1') && isOne(Buffer.from('1')))
  t.notOk(isOne('0') || isOne(Buffer.from('0')) || isOne(Buffer.from('11')) || isOne(1))
  t.ok(isEmpty('') && isEmpty(Buffer.alloc(0)))
  t.notOk(isEmpty(Buffer.from('1')) || isEmpty(undefined))
})

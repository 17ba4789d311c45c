import t from 'tap'
import { argOf } from '../../../lib/stores/redis/consume-script.js'

t.test('a number as a script argument is written as ioredis writes it, an unsafe integer in full digits', async (t) => {
  t.equal(argOf(0), '0')
  t.equal(argOf(255), '255', 'the small integers come from a table')
  t.equal(argOf(256), '256')
  t.equal(argOf(-1), '-1')
  t.equal(argOf(0.5), '0.5')
  t.equal(argOf(1 / 3), String(1 / 3), 'a fraction as String() writes it')
  t.equal(argOf(2 ** 53), '9007199254740992', 'beyond 2^53: full digits')
  t.equal(argOf(1e21), '1000000000000000000000', 'in full digits, not 1e+21')
})

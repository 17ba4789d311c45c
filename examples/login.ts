/**
 * Count only failed logins, per account. `POST /login` takes a token from the
 * account's bucket (5 at once, then 1 a minute) before it checks the password: a
 * wrong password leaves it spent (401), the right one clears the bucket (200). So
 * only failures count, and an account whose bucket is empty gets 429 with
 * `Retry-After`, even with the right password, until a token comes back. The edge
 * layer (20 per IP at once, then 1 a second) limits each client as a whole.
 *
 * The token is taken first, not after a wrong password was seen: the check takes
 * a while (a slow hash, as it should be), and with "peek, check, then take on
 * failure" 100 wrong guesses sent at once would all pass the peek, and all be checked.
 */
import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto'
import { promisify } from 'node:util'
import Fastify from 'fastify'
import tollgate, { memoryStore, RateLimitedError } from 'fastify-tollgate'
import type { Example } from './example.js'

/** Failed logins per account: 5 at once, then one a minute. */
export const FAILED_LOGINS = { capacity: 5, refillPerSecond: 1 / 60 }

const scryptAsync = promisify(scrypt) as (password: string, salt: Buffer, length: number) => Promise<Buffer>

/** A password as an app keeps it: an scrypt hash and its salt. */
interface Hashed { salt: Buffer, hash: Buffer }

async function hashPassword (password: string): Promise<Hashed> {
  const salt = randomBytes(16)
  return { salt, hash: await scryptAsync(password, salt, 32) }
}

/** The demo accounts, and a check that costs one hash whether the account exists or not. */
async function passwordCheck (): Promise<(account: string, password: string) => Promise<boolean>> {
  const accounts = new Map([['alice', await hashPassword('correct horse battery staple')], ['bob', await hashPassword('hunter2')]])
  const nobody = await hashPassword(randomBytes(16).toString('hex'))
  return async (account, password) => {
    const known = accounts.get(account)
    const hash = await scryptAsync(password, (known ?? nobody).salt, 32)
    return timingSafeEqual(hash, (known ?? nobody).hash) && known !== undefined
  }
}

interface Login { account: string, password: string }

const loginSchema = {
  body: {
    type: 'object',
    required: ['account', 'password'],
    additionalProperties: false,
    properties: { account: { type: 'string', minLength: 1, maxLength: 100 }, password: { type: 'string', maxLength: 200 } }
  }
}

export const example: Example = {
  about: 'Failed logins only: POST /login takes a token per account (5, then 1 a minute) and clears the account on success; an empty account gets 429 even with the right password.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 20, refillPerSecond: 1 } })
    const passwordMatches = await passwordCheck()
    app.post<{ Body: Login }>('/login', { schema: loginSchema }, async (request, reply) => {
      const account = request.body.account.trim().toLowerCase()
      const key = `login:${account}`
      const attempt = await app.tollgate.consume(key, FAILED_LOGINS)
      if (!attempt.allowed) {
        // Refused as the plugin refuses: the same error (429, TOLLGATE_RATE_LIMITED), Retry-After, not cached.
        const refusal = new RateLimitedError(attempt)
        if (refusal.retryAfterSeconds !== undefined) reply.header('retry-after', refusal.retryAfterSeconds)
        reply.header('cache-control', 'no-store')
        throw refusal
      }
      if (!await passwordMatches(account, request.body.password)) {
        return reply.code(401).send({ error: 'Wrong account or password', attemptsLeft: Math.floor(attempt.buckets[0]?.tokens ?? 0) })
      }
      await app.tollgate.reset(key)
      return { welcome: account }
    })
    return app
  },
  tryIt: (url) => {
    const login = (account: string, password: string): string =>
      `-X POST -H 'content-type: application/json' -d '{"account":"${account}","password":"${password}"}' ${url}/login`
    return `for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' ${login('alice', 'guess')}; done; echo   # 401 401 401 401 401 429
curl -i ${login('alice', 'correct horse battery staple')}   # 429 even with the right password, Retry-After: 60

curl -s ${login('bob', 'nope')}; echo   # 401, 4 attempts left: bob's failures are his own
curl -s ${login('bob', 'hunter2')}; echo   # 200, and bob's bucket is full again`
  }
}

/**
 * Count only failed logins, so that guessing is slow, and so that nobody else
 * can lock an account's owner out.
 *
 * - Per account and address: `POST /login` takes a token from the bucket of
 *   (account, client IP), 5 at once, then 1 a minute, before it checks the
 *   password. A wrong password leaves it spent (401); the right one clears it
 *   (200). An address that failed 5 times is refused (429, `Retry-After`) for that
 *   account, even with the right password; the owner, from another address, is not.
 * - Per account, across addresses: a looser ceiling, 100 failures an hour, slows a
 *   guesser with many addresses. It is not taken from the addresses the account
 *   last logged in from (this app remembers three per account), so it never
 *   refuses the owner there. Its price: once a guesser with many addresses has
 *   spent it, the owner's login from a new address is refused too (429), until it
 *   refills (one failure every 36 s). Where that matters, answer that refusal with
 *   a second check (a CAPTCHA, a link by email) instead of a 429.
 * - Per address, across accounts: the route's own edge bucket, 10 a minute per
 *   client IP (`key: 'ip'`: whatever `edge.key` says), taken in `onRequest`
 *   before the body is read, bounds what one address tries in all.
 *
 * An address shared by many (a NAT) shares these buckets. IPv6 clients are
 * counted per address here; the route's edge bucket groups them by subnet
 * (`edge.ipv6Subnet`), as the edge does.
 *
 * The tokens are taken first, not after a wrong password was seen: the check
 * takes a while (a slow hash, as it should be), and with "peek, check, then take
 * on failure" 100 wrong guesses sent at once would all pass the peek, and all be
 * checked. Taken first, 5 per address are, and 100 per account.
 */
import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto'
import { promisify } from 'node:util'
import Fastify, { type FastifyReply } from 'fastify'
import tollgate, { memoryStore, RateLimitedError, type LimitDecision } from 'fastify-tollgate'
import type { Example } from './example.js'

/** An account's failed logins from one address: 5 at once, then one a minute. */
export const FAILED_LOGINS = { capacity: 5, refillPerSecond: 1 / 60 }
/** An account's failed logins from addresses it did not log in from lately: 100 an hour. */
export const ACCOUNT_CEILING = { capacity: 100, refillPerSecond: 100 / 3600 }
/** Login attempts per client IP, whatever the account: 10 a minute. */
export const LOGIN_GUARD = { capacity: 10, refillPerSecond: 10 / 60, key: 'ip' } as const

const scryptAsync = promisify(scrypt) as (password: string, salt: Buffer, length: number, options: { N: number }) => Promise<Buffer>

/** A password as an app keeps it: an scrypt hash and its salt. */
interface Hashed { salt: Buffer, hash: Buffer }

async function hashPassword (password: string, cost: number): Promise<Hashed> {
  const salt = randomBytes(16)
  return { salt, hash: await scryptAsync(password, salt, 32, { N: cost }) }
}

/**
 * The demo accounts, and a check that costs one hash whether the account exists or not.
 * `cost`: scrypt's N (Node's default, 16 384, about 50 ms of CPU a check; the tests use a cheap one).
 */
async function passwordCheck (cost: number): Promise<(account: string, password: string) => Promise<boolean>> {
  const accounts = new Map([['alice', await hashPassword('correct horse battery staple', cost)], ['bob', await hashPassword('hunter2', cost)]])
  const nobody = await hashPassword(randomBytes(16).toString('hex'), cost)
  return async (account, password) => {
    const known = accounts.get(account)
    const hash = await scryptAsync(password, (known ?? nobody).salt, 32, { N: cost })
    return timingSafeEqual(hash, (known ?? nobody).hash) && known !== undefined
  }
}

/** Where each account last logged in from (an app keeps this with the account, or as a device cookie). */
class KnownAddresses {
  private readonly byAccount = new Map<string, string[]>()
  has (account: string, ip: string): boolean { return this.byAccount.get(account)?.includes(ip) === true }
  add (account: string, ip: string): void {
    this.byAccount.set(account, [...(this.byAccount.get(account) ?? []).filter((known) => known !== ip), ip].slice(-3))
  }
}

/** Refused as the plugin refuses: the same error (429, TOLLGATE_RATE_LIMITED), Retry-After, not cached. */
function refuse (reply: FastifyReply, decision: LimitDecision): never {
  const refusal = new RateLimitedError(decision)
  if (refusal.retryAfterSeconds !== undefined) reply.header('retry-after', refusal.retryAfterSeconds)
  reply.header('cache-control', 'no-store')
  throw refusal
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
  about: 'Failed logins only, and no lockout by others: POST /login counts failures per account and address (5, then 1 a minute), and per account from new addresses (100 an hour); a success clears its address.',
  async build ({ clock, logger = false, env = process.env } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 20, refillPerSecond: 1 } })
    const passwordMatches = await passwordCheck(Number(env.SCRYPT_COST ?? 16_384))
    const knownAddresses = new KnownAddresses()
    app.post<{ Body: Login }>('/login', { schema: loginSchema, config: { rateLimit: { edge: LOGIN_GUARD } } }, async (request, reply) => {
      const account = request.body.account.trim().toLowerCase()
      const fromHere = `login:${JSON.stringify([account, request.ip])}` // unambiguous, whatever the account holds
      const ceiling = knownAddresses.has(account, request.ip) ? undefined : `login-account:${account}`
      const attempt = await app.tollgate.consume(fromHere, FAILED_LOGINS)
      if (!attempt.allowed) return refuse(reply, attempt)
      if (ceiling !== undefined) {
        const total = await app.tollgate.consume(ceiling, ACCOUNT_CEILING)
        if (!total.allowed) {
          await app.tollgate.refund(fromHere, FAILED_LOGINS) // not checked: this address's token back
          return refuse(reply, total)
        }
      }
      if (!await passwordMatches(account, request.body.password)) {
        return reply.code(401).send({ error: 'Wrong account or password', attemptsLeft: Math.floor(attempt.buckets[0]?.tokens ?? 0) })
      }
      await app.tollgate.reset(fromHere) // only failures count
      if (ceiling !== undefined) await app.tollgate.refund(ceiling, ACCOUNT_CEILING)
      knownAddresses.add(account, request.ip)
      return { welcome: account }
    })
    return app
  },
  tryIt: (url) => {
    const login = (account: string, password: string): string =>
      `-X POST -H 'content-type: application/json' -d '{"account":"${account}","password":"${password}"}' ${url}/login`
    return `for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' ${login('alice', 'guess')}; done; echo   # 401 401 401 401 401 429
curl -i ${login('alice', 'correct horse battery staple')}; echo   # 429 from this address even with the right password, Retry-After: 60; any other address logs in

curl -s ${login('bob', 'nope')}; echo   # 401, 4 attempts left: bob's failures are his own
curl -s ${login('bob', 'hunter2')}; echo   # 200, and bob's bucket for this address is full again`
  }
}

/**
 * Golden messages, startup: every error a bad option, route config, store option
 * or `per()` throws, its code and its message byte for byte as today. One row per
 * message template (and per way a shared check words it). Imports only the public
 * entry, so the test survives lib/ being moved around.
 */
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import tollgate, { memoryStore, per, redisStore, type LimiterOptions, type TollgateOptions } from '../../lib/index.js'
import { failure, readyWith } from '../helpers.js'

const P = { capacity: 5, refillPerSecond: 1 }
const tiers = { default: { capacity: 20, refillPerSecond: 5 }, pro: [{ name: 'second', capacity: 10, refillPerSecond: 10 }, { name: 'day', capacity: 1000, refillPerSecond: 0.1 }] }
const penalty = { after: 3, withinSeconds: 60, seconds: 300 }
/** A store with `consume` and `close` only. */
const bare = { consume: () => ({ allowed: true, tokens: [1], retryAfterMs: 0 }), close () {} }
/** A store with `refund` and `liveReplicas`, but no `settle`. */
const replicated = { ...bare, liveReplicas: 2, refund: () => 0 }
/** A client the store only declares its scripts on (options are checked first). */
const client = { defineCommand () {} }
class EdgeConfig { capacity = 5; refillPerSecond = 1; keySecret = 'a-secret-of-20-chars' }

const ok = async (): Promise<string> => 'ok'
/** ready() with `options` and a route POST /r whose `config.rateLimit` is `rateLimit`. */
const route = (rateLimit: unknown, options: unknown = { edge: P, app: { tiers } }) => async () => readyWith(options, (app: FastifyInstance) => {
  app.post('/r', { config: { rateLimit: rateLimit as false } }, ok)
})
const ready = (options: unknown) => async () => readyWith(options)
/** `fastify.tollgate.limiter(options)` on a registration with `plugin`'s options, after limiters named `taken`. */
const limiter = (options: unknown, taken: string[] = [], plugin: TollgateOptions = { edge: P }) => async () => {
  const app = Fastify()
  await app.register(tollgate, plugin)
  try {
    for (const name of taken) app.tollgate.limiter({ name, ...P })
    app.tollgate.limiter(options as LimiterOptions)
  } finally {
    await app.close()
  }
}

const O = 'TOLLGATE_INVALID_OPTION'
const R = 'TOLLGATE_INVALID_ROUTE_CONFIG'

type Row = [label: string, run: () => unknown, code: string, message: string]

const rows: Row[] = [
  // Plugin options (config/: options.ts, check.ts, edge.ts, app.ts, limits.ts, penalty.ts, allow-list.ts through them)
  ['options not an object', ready('fast'), O, 'Invalid fastify-tollgate option: Expected `options` to be an object, got `"fast"` (string)'],
  ['unknown option', ready({ edge: P, trustProxy: true }), O, 'Invalid fastify-tollgate option: Unknown option `options.trustProxy`; known options are `name`, `store`, `edge`, `app`, `protect`, `allowList`, `headers`, `shadow`, `shadowReport`, `onLimit`, `warnings`, `decisions`, `asyncTimeoutMs`'],
  ['no layer', ready({}), O, 'Invalid fastify-tollgate option: Expected at least one layer: `edge` or `app` must be set (both are omitted or `false`)'],
  ['store without consume', ready({ edge: P, store: {} }), O, 'Invalid fastify-tollgate option: Expected `store` to be a store with consume() and close(), such as memoryStore(), got `{}` (object)'],
  ['store a function', ready({ edge: P, store: function myStore () {} }), O, 'Invalid fastify-tollgate option: Expected `store` to be a store with consume() and close(), such as memoryStore(), got `function myStore` (function)'],
  ['store.quotaShare', ready({ edge: P, store: { ...bare, quotaShare: 2 } }), O, 'Invalid fastify-tollgate option: Expected `store.quotaShare` to be a number in (0, 1], got `2` (number)'],
  ['edge not an object', ready({ edge: true }), O, 'Invalid fastify-tollgate option: Expected `edge` to be an object, got `true` (boolean)'],
  ['edge a class instance, secrets hidden', ready({ edge: new EdgeConfig() }), O, 'Invalid fastify-tollgate option: Expected `edge` to be an object, got `{"capacity":5,"refillPerSecond":1,"keySecret":"[hidden]"}` (object)'],
  ['edge.global', ready({ edge: { ...P, global: 'no' } }), O, 'Invalid fastify-tollgate option: Expected `edge.global` to be a boolean, got `"no"` (string)'],
  ['unknown edge option, global false', ready({ edge: { global: false, capacity: 5 } }), O, 'Invalid fastify-tollgate option: Unknown option `edge.capacity`; known options are `key`, `keySecret`, `ipv6Subnet`, `global`, `mode`, `settleIntervalMs`, `penalty` (with `edge.global: false`, each route gives its own `rateLimit.edge` policy)'],
  ['unknown edge option', ready({ edge: { ...P, refilPerSecond: 1 } }), O, 'Invalid fastify-tollgate option: Unknown option `edge.refilPerSecond`; known options are `capacity`, `refillPerSecond`, `key`, `keySecret`, `ipv6Subnet`, `global`, `mode`, `settleIntervalMs`, `penalty`'],
  ['edge.capacity below 1', ready({ edge: { ...P, capacity: -1 } }), O, 'Invalid fastify-tollgate option: Expected `edge.capacity` to be a finite number ≥ 1, got `-1` (number)'],
  ['edge.capacity above 1e12', ready({ edge: { ...P, capacity: 2e12 } }), O, 'Invalid fastify-tollgate option: Expected `edge.capacity` to be at most 1e12 tokens (no client reaches 1e12: use it for a tier meant to be unlimited), got `2000000000000` (number)'],
  ['edge.refillPerSecond NaN', ready({ edge: { ...P, refillPerSecond: NaN } }), O, 'Invalid fastify-tollgate option: Expected `edge.refillPerSecond` to be a finite number ≥ 0, got `NaN` (number)'],
  ['edge.refillPerSecond above 1e12', ready({ edge: { ...P, refillPerSecond: 2e12 } }), O, 'Invalid fastify-tollgate option: Expected `edge.refillPerSecond` to be at most 1e12 tokens per second, got `2000000000000` (number)'],
  ['edge fills too slowly', ready({ edge: { capacity: 1e12, refillPerSecond: 0.001 } }), O, 'Invalid fastify-tollgate option: Expected `edge.refillPerSecond` to fill the bucket of 1000000000000 tokens within 1e10 seconds (about 317 years), got `0.001` (number), which takes 1000000000000000 s; for a bucket that never refills, write `refillPerSecond: 0`'],
  ['edge.key', ready({ edge: { ...P, key: 'x-api-key' } }), O, 'Invalid fastify-tollgate option: Expected `edge.key` to be a function, got `"x-api-key"` (string)'],
  ['edge.keySecret too short', ready({ edge: { ...P, keySecret: 'hunter2' } }), O, 'Invalid fastify-tollgate option: Expected `edge.keySecret` to be a string of at least 16 characters, got 7 characters (not shown: it is a secret)'],
  ['edge.keySecret not a string', ready({ edge: { ...P, keySecret: 1234 } }), O, 'Invalid fastify-tollgate option: Expected `edge.keySecret` to be a string of at least 16 characters, got a value of type number (not shown: it is a secret)'],
  ['edge.ipv6Subnet 0', ready({ edge: { ...P, ipv6Subnet: 0 } }), O, 'Invalid fastify-tollgate option: Expected `edge.ipv6Subnet` to be an integer ≥ 1, got `0` (number)'],
  ['edge.ipv6Subnet 129', ready({ edge: { ...P, ipv6Subnet: 129 } }), O, 'Invalid fastify-tollgate option: Expected `edge.ipv6Subnet` to be an integer from 1 to 128, got `129` (number)'],
  ['edge.mode', ready({ edge: { ...P, mode: 'fast' } }), O, 'Invalid fastify-tollgate option: Expected `edge.mode` to be \'exact\', \'replica-share\' or \'settle\', got `"fast"` (string)'],
  ['settleIntervalMs, mode left out', ready({ edge: { ...P, settleIntervalMs: 100 } }), O, "Invalid fastify-tollgate option: Expected `edge.settleIntervalMs` only with `edge.mode: 'settle'`, got it with `edge.mode` left to its default, 'exact'"],
  ['settleIntervalMs, replica-share', ready({ edge: { ...P, mode: 'replica-share', settleIntervalMs: 100 } }), O, "Invalid fastify-tollgate option: Expected `edge.settleIntervalMs` only with `edge.mode: 'settle'`, got it with `edge.mode: 'replica-share'`"],
  ['settleIntervalMs 0', ready({ edge: { ...P, mode: 'settle', settleIntervalMs: 0 } }), O, 'Invalid fastify-tollgate option: Expected `edge.settleIntervalMs` to be an integer ≥ 1, got `0` (number)'],
  ['settleIntervalMs above 60000', ready({ edge: { ...P, mode: 'settle', settleIntervalMs: 60_001 } }), O, 'Invalid fastify-tollgate option: Expected `edge.settleIntervalMs` to be an integer from 1 to 60000 (ms), got `60001` (number)'],
  ['replica-share without liveReplicas', ready({ edge: { ...P, mode: 'replica-share' }, store: bare }), O, "Invalid fastify-tollgate option: Expected a store with `liveReplicas` (as redisStore has) for `edge.mode: 'replica-share'`, got a store without; with this store, use `edge.mode: 'exact'`"],
  ['settle without settle()', ready({ edge: { ...P, mode: 'settle' }, store: { ...bare, liveReplicas: 2 } }), O, "Invalid fastify-tollgate option: Expected a store with `liveReplicas` and `settle()` (as redisStore has) for `edge.mode: 'settle'`, got a store without; with this store, use `edge.mode: 'exact'`"],
  ['edge.penalty with replica-share', ready({ edge: { ...P, mode: 'replica-share', penalty }, store: replicated }), O, "Invalid fastify-tollgate option: Expected `edge.penalty` with `edge.mode: 'exact'` (the penalty is kept in the shared store), got it with `edge.mode: 'replica-share'`"],
  ['penalty on a store without refund', ready({ edge: { ...P, penalty }, store: bare }), O, 'Invalid fastify-tollgate option: Expected a store with `refund()` (as memoryStore and redisStore have) for a `penalty`: the penalty is kept in the store, got a store without'],
  ['edge share below one token', ready({ edge: { capacity: 2, refillPerSecond: 1 }, store: memoryStore({ replicas: 4 }) }), O, "Invalid fastify-tollgate option: Expected `edge.capacity` × the store's quota share (0.25) to be ≥ 1, got 0.5 from `2`"],
  ['app not an object', ready({ app: 'x' }), O, 'Invalid fastify-tollgate option: Expected `app` to be an object, got `"x"` (string)'],
  ['app.digestIds', ready({ app: { tiers, digestIds: 'yes' } }), O, 'Invalid fastify-tollgate option: Expected `app.digestIds` to be a boolean, got `"yes"` (string)'],
  ['name', ready({ name: 'a.b', edge: P }), O, 'Invalid fastify-tollgate option: Expected `name` to be a name of 1 to 32 letters, digits, `_` or `-`, starting with a letter, got `"a.b"` (string)'],
  ['unknown app option', ready({ app: { tiers, cost: 2 } }), O, 'Invalid fastify-tollgate option: Unknown option `app.cost`; known options are `tiers`, `identify`, `hook`, `global`, `maxQuota`, `quotaClaim`, `penalty`, `digestIds`'],
  ['app.global', ready({ app: { tiers, global: 1 } }), O, 'Invalid fastify-tollgate option: Expected `app.global` to be a boolean, got `1` (number)'],
  ['app.tiers missing', ready({ app: {} }), O, 'Invalid fastify-tollgate option: Expected `app.tiers` to be an object, got `undefined` (undefined)'],
  ['app.tiers without default', ready({ app: { tiers: { pro: P } } }), O, 'Invalid fastify-tollgate option: Expected `app.tiers` to contain a `default` tier, got tiers `["pro"]` (array)'],
  ['tier list empty', ready({ app: { tiers: { default: [] } } }), O, 'Invalid fastify-tollgate option: Expected `app.tiers.default.length` to be an integer from 1 to 8, got `0` (number)'],
  ['tier list item not an object', ready({ app: { tiers: { default: [5] } } }), O, 'Invalid fastify-tollgate option: Expected `app.tiers.default[0]` to be an object, got `5` (number)'],
  ['limit name invalid', ready({ app: { tiers: { default: [{ name: '1st', ...P }] } } }), O, 'Invalid fastify-tollgate option: Expected `app.tiers.default[0].name` to be a name of 1 to 32 letters, digits, `_` or `-`, starting with a letter, got `"1st"` (string)'],
  ['limit named edge', ready({ app: { tiers: { default: [{ name: 'edge', ...P }] } } }), O, 'Invalid fastify-tollgate option: Expected `app.tiers.default[0].name` to differ from the edge\'s names (edge, edge-route), got `"edge"` (string)'],
  ['limit names twice', ready({ app: { tiers: { default: [{ name: 'a', ...P }, { name: 'a', ...P }] } } }), O, 'Invalid fastify-tollgate option: Expected the names in `app.tiers.default` to be unique, got `"a"` (string) twice'],
  ['unknown limit option', ready({ app: { tiers: { default: [{ name: 'a', ...P, burst: 1 }] } } }), O, 'Invalid fastify-tollgate option: Unknown option `app.tiers.default[0].burst`; known options are `capacity`, `refillPerSecond`, `name`'],
  ['app.hook', ready({ app: { tiers, hook: 'onSend' } }), O, 'Invalid fastify-tollgate option: Expected `app.hook` to be \'preHandler\', or \'preValidation\', or \'preParsing\', got `"onSend"` (string)'],
  ['app.maxQuota', ready({ app: { tiers, maxQuota: { capacity: 0, refillPerSecond: 1 } } }), O, 'Invalid fastify-tollgate option: Expected `app.maxQuota.capacity` to be a finite number ≥ 1, got `0` (number)'],
  ['app.quotaClaim empty', ready({ app: { tiers, quotaClaim: '' } }), O, 'Invalid fastify-tollgate option: Expected `app.quotaClaim` to be a non-empty string, got `""` (string)'],
  ['app.quotaClaim sub', ready({ app: { tiers, quotaClaim: 'sub' } }), O, 'Invalid fastify-tollgate option: Expected `app.quotaClaim` to be a claim other than `sub` and `tier` (they hold the id and the tier), got `"sub"` (string)'],
  ['app.quotaClaim with identify', ready({ app: { tiers, quotaClaim: 'q', maxQuota: P, identify: () => undefined } }), O, 'Invalid fastify-tollgate option: Expected `app.quotaClaim` without `app.identify`: the claim is read by the default identify (`request.user`); with your own `identify`, return the quota as `quota`'],
  ['app.quotaClaim without maxQuota', ready({ app: { tiers, quotaClaim: 'q' } }), O, 'Invalid fastify-tollgate option: Expected `app.maxQuota` with `app.quotaClaim`: the largest quota a token may carry, e.g. `{ capacity: 10000, refillPerSecond: 1000 }`'],
  ['app.identify', ready({ app: { tiers, identify: 'sub' } }), O, 'Invalid fastify-tollgate option: Expected `app.identify` to be a function, got `"sub"` (string)'],
  ['app.penalty not an object', ready({ app: { tiers, penalty: true } }), O, 'Invalid fastify-tollgate option: Expected `app.penalty` to be an object, got `true` (boolean)'],
  ['unknown penalty option', ready({ app: { tiers, penalty: { ...penalty, for: 1 } } }), O, 'Invalid fastify-tollgate option: Unknown option `app.penalty.for`; known options are `after`, `withinSeconds`, `seconds`, `status`'],
  ['penalty.after 0', ready({ app: { tiers, penalty: { ...penalty, after: 0 } } }), O, 'Invalid fastify-tollgate option: Expected `app.penalty.after` to be an integer from 1 to 1000000, got `0` (number)'],
  ['penalty.withinSeconds 0', ready({ app: { tiers, penalty: { ...penalty, withinSeconds: 0 } } }), O, 'Invalid fastify-tollgate option: Expected `app.penalty.withinSeconds` to be a number of seconds from 0.001 to 1e10, got `0` (number)'],
  ['penalty.seconds 0.5', ready({ app: { tiers, penalty: { ...penalty, seconds: 0.5 } } }), O, 'Invalid fastify-tollgate option: Expected `app.penalty.seconds` to be a finite number ≥ 1, got `0.5` (number)'],
  ['penalty.seconds 2e10', ready({ app: { tiers, penalty: { ...penalty, seconds: 2e10 } } }), O, 'Invalid fastify-tollgate option: Expected `app.penalty.seconds` to be a number of seconds from 1 to 1e10, got `20000000000` (number)'],
  ['penalty.status 404', ready({ app: { tiers, penalty: { ...penalty, status: 404 } } }), O, 'Invalid fastify-tollgate option: Expected `app.penalty.status` to be 429 or 403, got `404` (number)'],
  ['headers', ready({ edge: P, headers: 'ietf' }), O, 'Invalid fastify-tollgate option: Expected `headers` to be \'draft\', \'draft-03\', \'legacy\' or false, got `"ietf"` (string)'],
  ['headers, a long value cut', ready({ edge: P, headers: 'x'.repeat(100) }), O, 'Invalid fastify-tollgate option: Expected `headers` to be \'draft\', \'draft-03\', \'legacy\' or false, got `"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...` (string)'],
  ['shadow', ready({ edge: P, shadow: 'yes' }), O, 'Invalid fastify-tollgate option: Expected `shadow` to be a boolean, got `"yes"` (string)'],
  ['onLimit', ready({ edge: P, onLimit: 1 }), O, 'Invalid fastify-tollgate option: Expected `onLimit` to be a function, got `1` (number)'],
  ['shadowReport not an object', ready({ edge: P, shadowReport: 5 }), O, 'Invalid fastify-tollgate option: Expected `shadowReport` to be an object, got `5` (number)'],
  ['unknown shadowReport option', ready({ edge: P, shadowReport: { top: 5 } }), O, 'Invalid fastify-tollgate option: Unknown option `shadowReport.top`; known options are `minutes`, `keys`'],
  ['shadowReport.minutes 61', ready({ edge: P, shadowReport: { minutes: 61 } }), O, 'Invalid fastify-tollgate option: Expected `shadowReport.minutes` to be an integer from 1 to 60, got `61` (number)'],
  ['shadowReport.keys 5', ready({ edge: P, shadowReport: { keys: 5 } }), O, 'Invalid fastify-tollgate option: Expected `shadowReport.keys` to be an integer from 10 to 10000, got `5` (number)'],
  ['shadowReport too many entries', ready({ edge: P, shadowReport: { minutes: 60, keys: 10_000 } }), O, 'Invalid fastify-tollgate option: Expected `shadowReport.minutes` × `shadowReport.keys` to be at most 100000 (the clients kept in all), got 60 × 10000 = 600000'],
  ['warnings not an object', ready({ edge: P, warnings: 'no' }), O, 'Invalid fastify-tollgate option: Expected `warnings` to be an object, got `"no"` (string)'],
  ['unknown warning', ready({ edge: P, warnings: { TOLLGATE_NOPE: false } }), O, 'Invalid fastify-tollgate option: Unknown option `warnings.TOLLGATE_NOPE`; known options are `TOLLGATE_TRUST_PROXY_TRUE`, `TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY`, `TOLLGATE_ONLY_ANONYMOUS`, `TOLLGATE_ROUTE_BEFORE_PLUGIN`, `TOLLGATE_IDENTITY_QUOTA_IGNORED`, `TOLLGATE_SHARED_STORE`, `TOLLGATE_EDGE_MODE_LOCAL`, `TOLLGATE_NO_ROUTES`, `TOLLGATE_TIER_ABOVE_EDGE`'],
  ['warning not a boolean', ready({ edge: P, warnings: { TOLLGATE_SHARED_STORE: 'no' } }), O, 'Invalid fastify-tollgate option: Expected `warnings.TOLLGATE_SHARED_STORE` to be a boolean, got `"no"` (string)'],
  ['decisions', ready({ edge: P, decisions: 'yes' }), O, 'Invalid fastify-tollgate option: Expected `decisions` to be a boolean, got `"yes"` (string)'],
  ['asyncTimeoutMs', ready({ edge: P, asyncTimeoutMs: 0 }), O, 'Invalid fastify-tollgate option: Expected `asyncTimeoutMs` to be an integer from 1 to 60000, got `0` (number)'],
  ['allowList a number', ready({ edge: P, allowList: 5 }), O, 'Invalid fastify-tollgate option: Expected `allowList` to be an array of IP addresses and CIDR ranges, a function of the request, or { addresses, match }, got `5` (number)'],
  ['unknown allowList option', ready({ edge: P, allowList: { ips: [] } }), O, 'Invalid fastify-tollgate option: Unknown option `allowList.ips`; known options are `addresses`, `match`'],
  ['allowList.addresses not an array', ready({ edge: P, allowList: { addresses: '10.0.0.0/8' } }), O, 'Invalid fastify-tollgate option: Expected `allowList.addresses` to be an array of IP addresses and CIDR ranges, got `"10.0.0.0/8"` (string)'],
  ['allowList entry', ready({ edge: P, allowList: ['10.0.0.0/8', '10.0.0.0/33'] }), O, 'Invalid fastify-tollgate option: Expected `allowList[1]` to be an IP address or a CIDR range (IPv4 or IPv6, e.g. `10.0.0.0/8`), got `"10.0.0.0/33"` (string)'],
  ['allowList.addresses entry', ready({ edge: P, allowList: { addresses: ['nope'] } }), O, 'Invalid fastify-tollgate option: Expected `allowList.addresses[0]` to be an IP address or a CIDR range (IPv4 or IPv6, e.g. `10.0.0.0/8`), got `"nope"` (string)'],
  ['allowList.match', ready({ edge: P, allowList: { match: 'x' } }), O, 'Invalid fastify-tollgate option: Expected `allowList.match` to be a function, got `"x"` (string)'],

  // Route configs (options.ts checkRouteConfig)
  ['rateLimit not an object', route(5), R, 'Invalid config.rateLimit on route POST /r: Expected `rateLimit` to be an object, got `5` (number)'],
  ['unknown rateLimit option', route({ limit: 5 }), R, 'Invalid config.rateLimit on route POST /r: Unknown option `rateLimit.limit`; known options are `cost`, `quota`, `edge`, `app`, `penalty`, `replace`, `critical`, `latencyMs`'],
  ['rateLimit.app', route({ app: 'yes' }), R, 'Invalid config.rateLimit on route POST /r: Expected `rateLimit.app` to be a boolean, got `"yes"` (string)'],
  ['cost with app false', route({ app: false, cost: 2 }), R, 'Invalid config.rateLimit on route POST /r: `rateLimit.cost` and `rateLimit.quota` belong to the app layer, which `rateLimit.app: false` leaves out'],
  ['cost without the app layer', route({ cost: 2 }, { edge: P }), R, 'Invalid config.rateLimit on route POST /r: `rateLimit.app`, `rateLimit.cost` and `rateLimit.quota` need the app layer, which is disabled (set the `app` option)'],
  ['rateLimit.edge without the edge layer', route({ edge: P }, { app: { tiers } }), R, 'Invalid config.rateLimit on route POST /r: `rateLimit.edge` needs the edge layer, which is disabled (set the `edge` option; `edge: { global: false }` runs it only for routes with their own `rateLimit.edge`)'],
  ['rateLimit.edge true', route({ edge: true }), R, 'Invalid config.rateLimit on route POST /r: Expected `rateLimit.edge` to be false or a policy { capacity, refillPerSecond }, got `true` (boolean)'],
  ['rateLimit.edge policy', route({ edge: { capacity: 0, refillPerSecond: 1 } }), R, 'Invalid config.rateLimit on route POST /r: Expected `rateLimit.edge.capacity` to be a finite number ≥ 1, got `0` (number)'],
  ['rateLimit.edge share below one token', route({ edge: { capacity: 2, refillPerSecond: 1 } }, { edge: P, store: memoryStore({ replicas: 4 }) }), R, "Invalid config.rateLimit on route POST /r: Expected `rateLimit.edge.capacity` × the store's quota share (0.25) to be ≥ 1, got 0.5 from `2`"],
  ['rateLimit.edge.key', route({ edge: { ...P, key: 'header' } }), R, "Invalid config.rateLimit on route POST /r: Expected `rateLimit.edge.key` to be 'edge', 'ip' or a function of the request, got `\"header\"` (string)"],
  ['unknown rateLimit.edge option', route({ edge: { ...P, keyGenerator: () => 'k' } }), R, 'Invalid config.rateLimit on route POST /r: Unknown option `rateLimit.edge.keyGenerator`; known options are `capacity`, `refillPerSecond`, `key`'],
  ['rateLimit.replace', route({ replace: 'yes' }), R, 'Invalid config.rateLimit on route POST /r: Expected `rateLimit.replace` to be a boolean, got `"yes"` (string)'],
  ['rateLimit.replace without a bucket', route({ replace: true }), R, "Invalid config.rateLimit on route POST /r: `rateLimit.replace` replaces the layers' buckets with the route's own: give the route `rateLimit.edge` (a policy) or `rateLimit.quota`"],
  ['rateLimit.penalty', route({ penalty: { ...penalty, status: 500 } }), R, 'Invalid config.rateLimit on route POST /r: Expected `rateLimit.penalty.status` to be 429 or 403, got `500` (number)'],
  ['route penalty on a store without refund', route({ penalty }, { edge: P, store: bare }), R, 'Invalid config.rateLimit on route POST /r: Expected a store with `refund()` (as memoryStore and redisStore have) for a `penalty`: the penalty is kept in the store, got a store without'],
  ['route penalty with replica-share', route({ penalty }, { edge: { ...P, mode: 'replica-share' }, store: replicated }), R, "Invalid config.rateLimit on route POST /r: Expected `rateLimit.penalty` on a route the edge limits with `edge.mode: 'exact'` (the penalty is kept in the shared store), got `edge.mode: 'replica-share'` (or give the route `edge: false`)"],
  ['cost negative', route({ cost: -1 }), R, 'Invalid config.rateLimit on route POST /r: Expected `rateLimit.cost` to be a finite number ≥ 0, got `-1` (number)'],
  ['cost above a tier', route({ cost: 21 }), R, "Invalid config.rateLimit on route POST /r: Expected `rateLimit.cost` to be at most the capacity of every tier, got `21` above tier `default`'s capacity 20: it could never pass"],
  ['cost above a limit of a list', route({ cost: 11 }), R, "Invalid config.rateLimit on route POST /r: Expected `rateLimit.cost` to be at most the capacity of every tier, got `11` above the capacity 10 of tier `pro`'s limit `second`: it could never pass"],
  ['cost a string', route({ cost: '10' }), R, 'Invalid config.rateLimit on route POST /r: Expected `rateLimit.cost` to be a finite number ≥ 0 or a function of the request, got `"10"` (string)'],
  ['quota without default', route({ quota: { pro: P } }), R, 'Invalid config.rateLimit on route POST /r: Expected `rateLimit.quota` to contain a `default` tier, got tiers `["pro"]` (array)'],
  ['quota of an unknown tier', route({ quota: { default: P, vip: P } }), R, 'Invalid config.rateLimit on route POST /r: Expected `rateLimit.quota` to name only tiers of `app.tiers` (default, pro), got `"vip"` (string)'],
  ['quota limit named like a tier limit', route({ quota: { default: [{ name: 'day', ...P }] } }), R, 'Invalid config.rateLimit on route POST /r: Expected the limits of `rateLimit.quota` to be named apart from tier `pro`\'s limits (second, day), got `"day"` (string) in both (a tier of one policy is named `app`, a route quota of one policy `route`)'],
  ['quota policy', route({ quota: { default: { capacity: 1, refillPerSecond: -1 } } }), R, 'Invalid config.rateLimit on route POST /r: Expected `rateLimit.quota.default.refillPerSecond` to be a finite number ≥ 0, got `-1` (number)'],
  ['route of several methods, constraints', async () => readyWith({ edge: P, app: { tiers } }, (app) => {
    app.route({ method: ['GET', 'POST'], url: '/m/', constraints: { version: '1.0.0' }, config: { rateLimit: { cost: -1 } }, handler: ok })
  }), R, 'Invalid config.rateLimit on route GET,POST /m/: Expected `rateLimit.cost` to be a finite number ≥ 0, got `-1` (number)'],

  // fastify.tollgate.limiter() (config/limiter.ts)
  ['limiter not an object', limiter('otp'), O, 'Invalid fastify-tollgate option: Expected `limiter` to be an object, got `"otp"` (string)'],
  ['unknown limiter option', limiter({ name: 'otp', ...P, max: 3 }), O, 'Invalid fastify-tollgate option: Unknown option `limiter.max`; known options are `name`, `capacity`, `refillPerSecond`, `key`, `cost`, `penalty`, `allowList`'],
  ['limiter.name missing', limiter(P), O, 'Invalid fastify-tollgate option: Expected `limiter.name` to be a name of 1 to 32 letters, digits, `_` or `-`, starting with a letter, got `undefined` (undefined)'],
  ['limiter.name invalid', limiter({ name: 'otp send', ...P }), O, 'Invalid fastify-tollgate option: Expected `limiter.name` to be a name of 1 to 32 letters, digits, `_` or `-`, starting with a letter, got `"otp send"` (string)'],
  ['limiter.name reserved', limiter({ name: 'app', ...P }), O, "Invalid fastify-tollgate option: Expected `limiter.name` to differ from the plugin's own bucket names (edge, edge-route, app, route, manual), got `\"app\"` (string)"],
  ['limiter.name twice', limiter({ name: 'otp', ...P }, ['otp']), O, 'Invalid fastify-tollgate option: Expected `limiter.name` to be unique in this registration (limiters of one name would share their buckets), got `"otp"` (string) twice'],
  ['limiter.capacity', limiter({ name: 'otp', capacity: 0, refillPerSecond: 1 }), O, 'Invalid fastify-tollgate option: Expected `limiter.capacity` to be a finite number ≥ 1, got `0` (number)'],
  ['limiter.refillPerSecond', limiter({ name: 'otp', capacity: 3 }), O, 'Invalid fastify-tollgate option: Expected `limiter.refillPerSecond` to be a finite number ≥ 0, got `undefined` (undefined)'],
  ['limiter share below one token', limiter({ name: 'otp', capacity: 2, refillPerSecond: 1 }, [], { edge: P, store: memoryStore({ replicas: 4 }) }), O, "Invalid fastify-tollgate option: Expected `limiter.capacity` × the store's quota share (0.25) to be ≥ 1, got 0.5 from `2`"],
  ['limiter.key', limiter({ name: 'otp', ...P, key: 'x-user' }), O, 'Invalid fastify-tollgate option: Expected `limiter.key` to be a function, got `"x-user"` (string)'],
  ['limiter.cost a string', limiter({ name: 'otp', ...P, cost: '2' }), O, 'Invalid fastify-tollgate option: Expected `limiter.cost` to be a finite number ≥ 0 or a function of the request, got `"2"` (string)'],
  ['limiter.cost negative', limiter({ name: 'otp', ...P, cost: -1 }), O, 'Invalid fastify-tollgate option: Expected `limiter.cost` to be a finite number ≥ 0, got `-1` (number)'],
  ['limiter.cost above capacity', limiter({ name: 'otp', ...P, cost: 6 }), O, 'Invalid fastify-tollgate option: Expected `limiter.cost` to be at most `limiter.capacity` (5), got `6`: it could never pass'],
  ['limiter.penalty', limiter({ name: 'otp', ...P, penalty: { ...penalty, status: 401 } }), O, 'Invalid fastify-tollgate option: Expected `limiter.penalty.status` to be 429 or 403, got `401` (number)'],
  ['limiter penalty on a store without refund', limiter({ name: 'otp', ...P, penalty }, [], { edge: P, store: bare }), O, 'Invalid fastify-tollgate option: Expected a store with `refund()` (as memoryStore and redisStore have) for a `penalty`: the penalty is kept in the store, got a store without'],
  ['limiter.allowList', limiter({ name: 'otp', ...P, allowList: 'no' }), O, 'Invalid fastify-tollgate option: Expected `limiter.allowList` to be a boolean, got `"no"` (string)'],

  // per() (limits.ts)
  ['per count 0', () => per(0, 'second'), O, 'Invalid fastify-tollgate option: Expected `per(count)` to be a finite number ≥ 1, got `0` (number)'],
  ['per period 0', () => per(1, 0), O, 'Invalid fastify-tollgate option: Expected `per(…, period)` to be a number of seconds > 0, got `0` (number)'],
  ['per period unknown', () => per(1, 'fortnight' as 'second'), O, 'Invalid fastify-tollgate option: Expected `per(…, period)` to be \'second\', \'minute\', \'hour\', \'day\', \'week\' or a number of seconds > 0, got `"fortnight"` (string)'],

  // memoryStore() (stores/memory.ts)
  ['memoryStore not an object', () => memoryStore('x' as never), O, 'Invalid fastify-tollgate option: Expected `memoryStore` to be an object, got `"x"` (string)'],
  ['unknown memoryStore option', () => memoryStore({ max: 5 } as never), O, 'Invalid fastify-tollgate option: Unknown option `memoryStore.max`; known options are `clock`, `maxKeys`, `replicas`, `sweepIntervalMs`'],
  ['memoryStore.clock', () => memoryStore({ clock: 5 } as never), O, 'Invalid fastify-tollgate option: Expected `memoryStore.clock` to be a function, got `5` (number)'],
  ['memoryStore.maxKeys', () => memoryStore({ maxKeys: 0 }), O, 'Invalid fastify-tollgate option: Expected `memoryStore.maxKeys` to be an integer ≥ 1, got `0` (number)'],
  ['memoryStore.replicas', () => memoryStore({ replicas: 1.5 }), O, 'Invalid fastify-tollgate option: Expected `memoryStore.replicas` to be an integer ≥ 1, got `1.5` (number)'],
  ['memoryStore.sweepIntervalMs', () => memoryStore({ sweepIntervalMs: 0.5 }), O, 'Invalid fastify-tollgate option: Expected `memoryStore.sweepIntervalMs` to be an integer of ms from 1 to 2147483647 (the longest delay of a Node timer), got `0.5` (number)'],
  ['memoryStore.sweepIntervalMs above a timer', () => memoryStore({ sweepIntervalMs: 2 ** 31 }), O, 'Invalid fastify-tollgate option: Expected `memoryStore.sweepIntervalMs` to be an integer of ms from 1 to 2147483647 (the longest delay of a Node timer), got `2147483648` (number)'],

  // redisStore() (stores/redis.ts)
  ['redisStore not an object', () => redisStore(undefined as never), O, 'Invalid fastify-tollgate option: Expected `redisStore` to be an object, got `undefined` (undefined)'],
  ['unknown redisStore option', () => redisStore({ client, ttl: 5 } as never), O, 'Invalid fastify-tollgate option: Unknown option `redisStore.ttl`; known options are `client`, `prefix`, `timeoutMs`, `failMode`, `fallbackHeadroom`, `replicas`, `heartbeatIntervalMs`, `breakerThreshold`, `probeIntervalMs`, `denyCacheSize`, `maxBatch`, `neverFullTtlMs`, `logIntervalMs`, `connectWaitMs`, `clock`'],
  ['redisStore.client', () => redisStore({} as never), O, 'Invalid fastify-tollgate option: Expected `redisStore.client` to be an ioredis Redis or Cluster client, got `undefined` (undefined)'],
  ['redisStore.prefix', () => redisStore({ client, prefix: '{app}:' }), O, 'Invalid fastify-tollgate option: Expected `redisStore.prefix` to be a string without `{` or `}`, got `"{app}:"` (string)'],
  ['redisStore.failMode', () => redisStore({ client, failMode: 'retry' as 'open' }), O, 'Invalid fastify-tollgate option: Expected `redisStore.failMode` to be \'open\', \'closed\' or \'local\', got `"retry"` (string)'],
  ['redisStore.timeoutMs', () => redisStore({ client, timeoutMs: 0 }), O, 'Invalid fastify-tollgate option: Expected `redisStore.timeoutMs` to be a number of ms from 1 to 2147483647 (the longest delay of a Node timer), got `0` (number)'],
  ['redisStore.fallbackHeadroom', () => redisStore({ client, fallbackHeadroom: -1 }), O, 'Invalid fastify-tollgate option: Expected `redisStore.fallbackHeadroom` to be a finite number ≥ 0, got `-1` (number)'],
  ['redisStore.replicas', () => redisStore({ client, replicas: 0 }), O, 'Invalid fastify-tollgate option: Expected `redisStore.replicas` to be an integer ≥ 1, got `0` (number)'],
  ['redisStore.heartbeatIntervalMs', () => redisStore({ client, heartbeatIntervalMs: 1.5 }), O, 'Invalid fastify-tollgate option: Expected `redisStore.heartbeatIntervalMs` to be an integer of ms from 0 to 2147483647 (the longest delay of a Node timer), got `1.5` (number)'],
  ['redisStore.breakerThreshold', () => redisStore({ client, breakerThreshold: 0 }), O, 'Invalid fastify-tollgate option: Expected `redisStore.breakerThreshold` to be an integer ≥ 1, got `0` (number)'],
  ['redisStore.probeIntervalMs', () => redisStore({ client, probeIntervalMs: 0 }), O, 'Invalid fastify-tollgate option: Expected `redisStore.probeIntervalMs` to be a number of ms from 1 to 2147483647 (the longest delay of a Node timer), got `0` (number)'],
  ['redisStore.denyCacheSize', () => redisStore({ client, denyCacheSize: -1 }), O, 'Invalid fastify-tollgate option: Expected `redisStore.denyCacheSize` to be an integer ≥ 0, got `-1` (number)'],
  ['redisStore.maxBatch', () => redisStore({ client, maxBatch: 0 }), O, 'Invalid fastify-tollgate option: Expected `redisStore.maxBatch` to be an integer from 1 to 10000, got `0` (number)'],
  ['redisStore.neverFullTtlMs', () => redisStore({ client, neverFullTtlMs: 0 }), O, 'Invalid fastify-tollgate option: Expected `redisStore.neverFullTtlMs` to be an integer ≥ 1, got `0` (number)'],
  ['redisStore.logIntervalMs', () => redisStore({ client, logIntervalMs: -1 }), O, 'Invalid fastify-tollgate option: Expected `redisStore.logIntervalMs` to be a finite number ≥ 0, got `-1` (number)'],
  ['redisStore.connectWaitMs', () => redisStore({ client, connectWaitMs: -1 }), O, 'Invalid fastify-tollgate option: Expected `redisStore.connectWaitMs` to be a number of ms from 0 to 2147483647 (the longest delay of a Node timer), got `-1` (number)'],
  ['redisStore.clock', () => redisStore({ client, clock: 5 as never }), O, 'Invalid fastify-tollgate option: Expected `redisStore.clock` to be a function, got `5` (number)']
]

t.test('every startup error, its code and message byte-identical to today', async (t) => {
  t.equal(new Set(rows.map(([label]) => label)).size, rows.length, 'labels are unique')
  for (const [label, run, code, message] of rows) {
    t.same(await failure(run), { code, message }, label)
  }
})

/**
 * The Redis store's Lua scripts (scripts/*.lua, shipped next to this file), read
 * once when this module loads, and their registration on a client. The shared
 * helpers (scripts/helpers.lua: the clock, `fmt`, `levelAt`, `enough`, `retryWait`,
 * `readState`, `writeState`) are written once and prepended to every script that
 * uses them; the heartbeat uses none.
 */
import { readFileSync } from 'node:fs'
import type { RedisClientLike, ScriptCall } from './client.js'

const read = (name: string): string => readFileSync(new URL(`./scripts/${name}.lua`, import.meta.url), 'utf8')
const HELPERS = read('helpers')
/** The first line of a script that may touch keys of several slots of one Cluster node (Redis 7+). */
const CROSS_SLOT = '#!lua flags=allow-cross-slot-keys\n'

/** For a single Redis: every decision of a call shares one server. */
const CONSUME_SCRIPT = HELPERS + read('consume')

/**
 * For Redis Cluster (Redis 7+): one call carries the decisions of many identities
 * whose slots live on one node (each decision's own keys share one slot); the
 * flag lets the script touch keys of several slots of that node.
 */
const CONSUME_SCRIPT_CLUSTER = CROSS_SLOT + CONSUME_SCRIPT

/** One bucket, read, given back or deleted (`fastify.tollgate.peek`, `refund`, `reset`). */
const BUCKET_SCRIPT = HELPERS + read('bucket')

/** Settlement (`edge.mode: 'settle'`) on a single Redis. */
const SETTLE_SCRIPT = HELPERS + read('settle')

/** Settlement on a Cluster node: the keys of one call may live in several of its slots. */
const SETTLE_SCRIPT_CLUSTER = CROSS_SLOT + SETTLE_SCRIPT

/** The replica heartbeat. */
const HEARTBEAT_SCRIPT = read('heartbeat')

/** The scripts as commands defined on one client; `consume` and `settle` are the Cluster variants on a Cluster. */
export interface Scripts {
  consume: ScriptCall
  bucket: ScriptCall
  settle: ScriptCall
  heartbeat: ScriptCall
}

const CONSUME_COMMAND = 'tollgateConsume'
const CONSUME_CLUSTER_COMMAND = 'tollgateConsumeCluster'
const HEARTBEAT_COMMAND = 'tollgateHeartbeat'
const BUCKET_COMMAND = 'tollgateBucket'
const SETTLE_COMMAND = 'tollgateSettle'
const SETTLE_CLUSTER_COMMAND = 'tollgateSettleCluster'

/**
 * The command `name` replying Buffers (ioredis and iovalkey define `<name>Buffer`
 * with every command), else `name` itself. Per request, the decoding of the consume
 * script's reply into strings cost about as much as reading its numbers from the
 * bytes (reply.ts).
 */
function bufferVariant (commands: Record<string, ScriptCall>, name: string): ScriptCall {
  return commands[`${name}Buffer`] ?? commands[name] as ScriptCall
}

/** Defines every script on `client` (both variants of the batched ones); returns those this client uses. */
export function defineScripts (client: RedisClientLike, cluster: boolean): Scripts {
  client.defineCommand(CONSUME_COMMAND, { lua: CONSUME_SCRIPT })
  client.defineCommand(CONSUME_CLUSTER_COMMAND, { lua: CONSUME_SCRIPT_CLUSTER })
  client.defineCommand(HEARTBEAT_COMMAND, { lua: HEARTBEAT_SCRIPT, numberOfKeys: 1 })
  client.defineCommand(BUCKET_COMMAND, { lua: BUCKET_SCRIPT, numberOfKeys: 1 })
  client.defineCommand(SETTLE_COMMAND, { lua: SETTLE_SCRIPT })
  client.defineCommand(SETTLE_CLUSTER_COMMAND, { lua: SETTLE_SCRIPT_CLUSTER })
  const commands = client as unknown as Record<string, ScriptCall>
  return {
    consume: bufferVariant(commands, cluster ? CONSUME_CLUSTER_COMMAND : CONSUME_COMMAND),
    bucket: commands[BUCKET_COMMAND] as ScriptCall,
    settle: commands[cluster ? SETTLE_CLUSTER_COMMAND : SETTLE_COMMAND] as ScriptCall,
    heartbeat: commands[HEARTBEAT_COMMAND] as ScriptCall
  }
}

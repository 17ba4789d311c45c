// A flood of pre-encoded Redis commands for bench/sizing.js: plain sockets, a fixed
// number of commands in flight per connection, each reply only skipped over. A
// general client (ioredis) spends more CPU per call than Redis does on a one-decision
// script call, so on a machine of two cores it could not keep one redis-server busy.
import { connect } from 'node:net'

/** A command in RESP (what redis-cli and every client send): an array of bulk strings. */
export function encode (args) {
  let text = `*${args.length}\r\n`
  for (const arg of args) {
    const value = String(arg)
    text += `$${Buffer.byteLength(value)}\r\n${value}\r\n`
  }
  return Buffer.from(text)
}

/** The offset just past the CR LF of the line starting at `at`, or -1 if it is not all there. */
function lineEnd (buffer, at) {
  const cr = buffer.indexOf(13, at)
  return cr === -1 || cr + 1 >= buffer.length ? -1 : cr + 2
}

/** The offset just past one whole reply starting at `at`, or -1 if it is not all there; throws on an error reply. */
function skipReply (buffer, at) {
  if (at >= buffer.length) return -1
  const end = lineEnd(buffer, at)
  if (end === -1) return -1
  const type = buffer[at]
  const n = Number(buffer.toString('latin1', at + 1, end - 2))
  if (type === 0x2d) throw new Error(`Redis answered ${buffer.toString('utf8', at, end - 2)}`) // '-'
  if (type === 0x24) return n < 0 ? end : (end + n + 2 <= buffer.length ? end + n + 2 : -1) // '$'
  if (type !== 0x2a || n <= 0) return end // '+', ':', an empty or null '*'
  let next = end
  for (let i = 0; i < n && next !== -1; i++) next = skipReply(buffer, next)
  return next
}

/**
 * Sends `commands` (encoded), in turn from `from`, over `connections` sockets to
 * 127.0.0.1:`port`, `inFlight` unanswered at a time on each, until `seconds` have
 * passed; resolves with the commands answered once every socket has had all its answers.
 */
export async function flood ({ port, connections, inFlight, commands, seconds, from }) {
  const deadline = performance.now() + seconds * 1000
  let next = from
  let answered = 0
  const take = (count) => {
    const chunk = []
    for (let i = 0; i < count; i++) chunk.push(commands[next++ % commands.length])
    return Buffer.concat(chunk)
  }
  await Promise.all(Array.from({ length: connections }, () => new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    socket.setNoDelay(true)
    let pending = Buffer.alloc(0)
    let outstanding = inFlight
    socket.once('connect', () => socket.write(take(inFlight)))
    socket.on('error', reject)
    socket.on('data', (data) => {
      pending = pending.length === 0 ? data : Buffer.concat([pending, data])
      let at = 0
      let done = 0
      try {
        for (let end = skipReply(pending, at); end !== -1; end = skipReply(pending, at)) {
          at = end
          done++
        }
      } catch (error) {
        socket.destroy()
        reject(error)
        return
      }
      pending = pending.subarray(at)
      answered += done
      outstanding -= done
      if (performance.now() < deadline) {
        if (done > 0) socket.write(take(done))
        outstanding += done
      } else if (outstanding === 0) {
        socket.end()
        resolve()
      }
    })
  })))
  return answered
}

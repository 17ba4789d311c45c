/**
 * A TCP proxy in the harness process, between one replica and Redis: `cut()`
 * stops forwarding both ways while every socket stays open (the bytes wait in
 * the sockets, as on a network partition that TCP later recovers from), and
 * `mend()` forwards again, what waited included. `rewrite` (when set) changes
 * what Redis sends back, chunk by chunk: a middlebox that corrupts replies.
 */
import { connect, createServer, type Server, type Socket } from 'node:net'

export class TcpProxy {
  private readonly server: Server
  private readonly sockets = new Set<Socket>()
  private cut_ = false
  /** Applied to each chunk from Redis to the client while set. */
  rewrite: ((chunk: Buffer) => Buffer) | undefined

  constructor (private readonly targetPort: number, private readonly targetHost = '127.0.0.1') {
    this.server = createServer((client) => { this.accept(client) })
  }

  /** Listens on a free port of 127.0.0.1; resolves with it. */
  async listen (): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve))
    const address = this.server.address()
    return typeof address === 'object' && address !== null ? address.port : 0
  }

  /** Stops forwarding, both ways, on every socket (new ones included). */
  cut (): void {
    this.cut_ = true
    for (const socket of this.sockets) socket.pause()
  }

  /** Forwards again. */
  mend (): void {
    this.cut_ = false
    for (const socket of this.sockets) socket.resume()
  }

  async close (): Promise<void> {
    for (const socket of this.sockets) socket.destroy()
    await new Promise((resolve) => this.server.close(resolve))
  }

  private accept (client: Socket): void {
    const upstream = connect(this.targetPort, this.targetHost)
    for (const [from, to] of [[client, upstream], [upstream, client]] as const) {
      this.sockets.add(from)
      if (this.cut_) from.pause()
      from.on('data', (chunk: Buffer) => { to.write(from === upstream && this.rewrite !== undefined ? this.rewrite(chunk) : chunk) })
      from.on('error', () => { to.destroy() })
      from.on('close', () => { this.sockets.delete(from); to.destroy() })
    }
  }
}

import { memoryStore } from './dist/index.js'
const store = memoryStore({ maxKeys: 10_000 })
const policy = { capacity: 2, refillPerSecond: 1 }
let t0 = performance.now()
for (let i = 0; i < 1_000_000; i++) store.consume([{ key: `k${i}`, policy, cost: 1 }])
console.log('1M distinct', performance.now() - t0)
t0 = performance.now()
for (let i = 0; i < 1_000_000; i++) store.consume([{ key: `k${i % 1000}`, policy, cost: 1 }])
console.log('1M over 1000 keys', performance.now() - t0)

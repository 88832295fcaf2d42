// The JavaScript SDKs with keys of limited rights: what a policy's rights allow works,
// the rest raises the service's error, and nothing waits. Usage: node rights_check.mjs
// JSON, where JSON maps listen, send, manage and entity (a policy for "basic" only) to
// connection strings. Entities: queues basic and dlq, session queue workflows, topic news
// (subscription a), event hub telemetry. Writes "step NAME" to stderr as each check begins
// and exits 1 with a message on the first one that differs or takes more than 15 s.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.JSSDK_PREFIX ?? ".jssdk", "node_modules", "x.js"));
const { ServiceBusClient } = require("@azure/service-bus");
const { EventHubProducerClient, EventHubConsumerClient, earliestEventPosition } =
  require("@azure/event-hubs");

const cs = JSON.parse(process.argv[2]);
const OPTIONS = { retryOptions: { maxRetries: 0, timeoutInMs: 10000 } };
const WAIT = { maxWaitTimeInMs: 2000 };
const LIMIT_MS = 15_000;
const clients = Object.fromEntries(Object.entries(cs).map(([k, v]) => [k, new ServiceBusClient(v, OPTIONS)]));

async function refused(what, codes, run) {
  codes = [].concat(codes);
  try {
    await run();
  } catch (err) {
    if (!codes.includes(err.code)) throw new Error(`${what}: raised ${err.code} (${err.message}), expected ${codes}`);
    return;
  }
  throw new Error(`${what}: succeeded, expected ${codes}`);
}

async function closing(client, run) {
  try { return await run(client); } finally { await client.close(); }
}

const checks = {
  async listenCannotSend() {
    await refused("send with Listen", "UnauthorizedAccess",
      () => closing(clients.listen.createSender("basic"), (s) => s.sendMessages({ body: "x" })));
  },
  async sendSendsAndSchedules() {
    await closing(clients.send.createSender("basic"), async (s) => {
      await s.sendMessages({ body: "one", messageId: "m1" });
      await s.scheduleMessages({ body: "later", messageId: "m2" }, new Date(Date.now() + 3600_000));
    });
  },
  async sendCannotReceiveOrPeek() {
    await refused("receive with Send", "UnauthorizedAccess",
      () => closing(clients.send.createReceiver("basic"), (r) => r.receiveMessages(1, WAIT)));
    await refused("peek with Send", "UnauthorizedAccess",
      () => closing(clients.send.createReceiver("basic"), (r) => r.peekMessages(1)));
  },
  async listenReceivesPeeksAndSettles() {
    await closing(clients.listen.createReceiver("basic"), async (r) => {
      const [m] = await r.receiveMessages(1, WAIT);
      if (m?.messageId !== "m1") throw new Error(`received ${m?.messageId}, expected m1`);
      await r.renewMessageLock(m);
      await r.deadLetterMessage(m, { deadLetterReason: "test" });
      if ((await r.peekMessages(5)).length !== 1) throw new Error("peek: expected the scheduled message");
    });
  },
  async listenCannotSchedule() {
    await refused("schedule with Listen", "UnauthorizedAccess",
      () => closing(clients.listen.createSender("basic"),
        (s) => s.scheduleMessages({ body: "x" }, new Date(Date.now() + 3600_000))));
  },
  async listenReadsTheDeadLetterQueue() {
    await closing(clients.listen.createReceiver("basic", { subQueueType: "deadLetter" }), async (r) => {
      if ((await r.peekMessages(1)).length !== 1) throw new Error("dead-letter peek: nothing");
      const [d] = await r.receiveMessages(1, WAIT);
      if (d?.messageId !== "m1") throw new Error(`dead letter ${d?.messageId}, expected m1`);
      await r.completeMessage(d);
    });
  },
  async subscriptions() {
    await closing(clients.send.createSender("news"), (s) => s.sendMessages({ body: "n", messageId: "n1" }));
    await refused("subscription receive with Send", "UnauthorizedAccess",
      () => closing(clients.send.createReceiver("news", "a"), (r) => r.receiveMessages(1, WAIT)));
    await closing(clients.listen.createReceiver("news", "a"), async (r) => {
      if ((await r.peekMessages(1)).length !== 1) throw new Error("subscription peek: nothing");
      const [m] = await r.receiveMessages(1, WAIT);
      if (m?.messageId !== "n1") throw new Error(`subscription got ${m?.messageId}, expected n1`);
      await r.completeMessage(m);
    });
  },
  async sessions() {
    await closing(clients.send.createSender("workflows"), (s) => s.sendMessages({ body: "w", sessionId: "s1" }));
    // The service refuses the link as it refuses any (an attach without a source, then a
    // detach with the error); the SDK reads an attach without the session as a lock failure.
    await refused("accept a session with Send", ["UnauthorizedAccess", "SessionCannotBeLocked"],
      () => clients.send.acceptSession("workflows", "s1").then((r) => r.close()));
    const r = await clients.listen.acceptSession("workflows", "s1");
    await closing(r, async () => {
      await r.setSessionState("x");
      const [m] = await r.receiveMessages(1, WAIT);
      await r.completeMessage(m);
    });
  },
  async entityLevelKey() {
    await closing(clients.entity.createSender("basic"), (s) => s.sendMessages({ body: "e", messageId: "e1" }));
    await closing(clients.entity.createReceiver("basic"), async (r) => {
      const [m] = await r.receiveMessages(1, WAIT);
      await r.completeMessage(m);
    });
    await refused("another entity with an entity-level key", "UnauthorizedAccess",
      () => closing(clients.entity.createSender("dlq"), (s) => s.sendMessages({ body: "x" })));
  },
  async missingEntity() {
    await refused("send to a missing queue", "MessagingEntityNotFound",
      () => closing(clients.manage.createSender("nope"), (s) => s.sendMessages({ body: "x" })));
    await refused("receive from a missing queue", "MessagingEntityNotFound",
      () => closing(clients.manage.createReceiver("nope"), (r) => r.receiveMessages(1, WAIT)));
  },
  async eventHubs() {
    const producer = new EventHubProducerClient(cs.send, "telemetry");
    await closing(producer, async (p) => {
      await p.getPartitionIds();
      const batch = await p.createBatch({ partitionId: "0" });
      batch.tryAdd({ body: "e" });
      await p.sendBatch(batch);
    });
    await refused("event hub send with Listen", "UnauthorizedError", () => closing(
      new EventHubProducerClient(cs.listen, "telemetry", OPTIONS),
      (p) => p.sendBatch([{ body: "x" }], { partitionId: "0" })));
    for (const [key, want] of [["listen", null], ["send", "UnauthorizedError"]]) {
      const consumer = new EventHubConsumerClient("$Default", cs[key], "telemetry", OPTIONS);
      const outcome = await new Promise((resolve) => {
        const sub = consumer.subscribe("0", {
          processEvents: async (events) => { if (events.length) sub.close().then(() => resolve(null)); },
          processError: async (err) => { sub.close().then(() => resolve(err.code ?? String(err))); },
        }, { startPosition: earliestEventPosition, maxWaitTimeInSeconds: 1 });
      });
      await consumer.close();
      if (outcome !== want) throw new Error(`event hub read with ${key}: ${outcome}, expected ${want}`);
    }
  },
};

let step = "";
try {
  for (const [name, run] of Object.entries(checks)) {
    step = name;
    console.error(`step ${name}`);
    let timer;
    await Promise.race([run(), new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${name} did not finish within ${LIMIT_MS} ms`)), LIMIT_MS);
    })]).finally(() => clearTimeout(timer));
  }
  await Promise.all(Object.values(clients).map((c) => c.close()));
  console.log("ok");
  process.exit(0);
} catch (err) {
  console.error(`FAILED in ${step}: ${err?.stack ?? err}`);
  process.exit(1);
}

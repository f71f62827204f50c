import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { MemoryNonceStore, ProtocolErrorCode, ReplayGuard } from "@barnraise/protocol";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDatabase, DatabaseNonceStore, type Database } from "../src/index.ts";
import {
  migrateTestDatabase,
  openTestDatabase,
  testDatabaseProviders,
  type TestDatabase,
} from "../src/testing.ts";

const providers = testDatabaseProviders();

describe.each(providers)("database on %s", (provider) => {
  let testDb: TestDatabase;
  let db: Database;

  beforeAll(async () => {
    testDb = await openTestDatabase(provider);
    expect(await migrateTestDatabase(testDb.url)).toMatch(/successfully applied|No pending migrations/);
    db = createDatabase(testDb.url);
  }, 60_000);

  afterAll(async () => {
    await db.$disconnect();
    await testDb.dispose();
  });

  it.runIf(provider === "sqlite")(
    "keeps a SQLite database in write-ahead-log mode, also after a transaction",
    async () => {
      const mode = async () =>
        (await db.$queryRawUnsafe<{ journal_mode: string }[]>("PRAGMA journal_mode"))[0]?.journal_mode;
      expect(await mode()).toBe("wal");
      await db.$transaction([db.user.count(), db.experiment.count()]);
      // The mode is the file's, so it stays whatever connection asks.
      expect(await mode()).toBe("wal");
    },
  );

  it.runIf(provider === "sqlite")(
    "sets a busy timeout and NORMAL sync on the SQLite connection, also after transactions",
    async () => {
      const settings = async () => ({
        busyTimeout: Number(
          (await db.$queryRawUnsafe<{ timeout: number | bigint }[]>("PRAGMA busy_timeout"))[0]?.timeout,
        ),
        synchronous: Number(
          (await db.$queryRawUnsafe<{ synchronous: number | bigint }[]>("PRAGMA synchronous"))[0]
            ?.synchronous,
        ),
      });
      // 1 is NORMAL (SQLite's default is 2, FULL).
      expect(await settings()).toEqual({ busyTimeout: 5000, synchronous: 1 });
      await db.$transaction([db.user.count(), db.experiment.count()]);
      expect(await settings()).toEqual({ busyTimeout: 5000, synchronous: 1 });
      await db.$transaction(async (tx) => tx.user.count());
      expect(await settings()).toEqual({ busyTimeout: 5000, synchronous: 1 });
    },
  );

  it.runIf(provider === "sqlite")(
    "runs SQLite transactions on the client's one connection, and leaves none open after a rollback",
    async () => {
      // A temporary table lives on one connection only.
      await db.$executeRawUnsafe("CREATE TEMP TABLE connection_probe (x INTEGER)");
      await db.$transaction(async (tx) => tx.$executeRawUnsafe("INSERT INTO connection_probe VALUES (1)"));
      await db.$transaction([db.$executeRawUnsafe("INSERT INTO connection_probe VALUES (2)")]);
      await expect(
        db.$transaction(async (tx) => {
          await tx.$executeRawUnsafe("INSERT INTO connection_probe VALUES (3)");
          throw new Error("abandoned");
        }),
      ).rejects.toThrow("abandoned");
      const probe = await db.$queryRawUnsafe<{ x: number | bigint }[]>(
        "SELECT x FROM connection_probe ORDER BY x",
      );
      expect(probe.map((row) => Number(row.x))).toEqual([1, 2]);
      // No transaction is left open: a write now is committed, and another connection sees it.
      await db.user.create({ data: { username: "after-rollback" } });
      const other = createDatabase(testDb.url);
      try {
        expect(await other.user.count({ where: { username: "after-rollback" } })).toBe(1);
      } finally {
        await other.$disconnect();
      }
    },
  );

  it.runIf(provider === "sqlite")(
    "waits for another process's write transaction instead of failing with SQLITE_BUSY",
    async () => {
      // Another process (as a second platform process or a script would be) takes the write lock,
      // says so, and commits 700 ms later.
      const holder = spawn(
        process.execPath,
        [
          "--input-type=module",
          "-e",
          `import { createClient } from "@libsql/client";
           const client = createClient({ url: process.env.DATABASE_URL });
           const tx = await client.transaction("write");
           await tx.execute("INSERT INTO \\"User\\" (\\"id\\", \\"username\\", \\"createdAt\\") VALUES ('lock-holder', 'lock-holder', 0)");
           console.log("locked");
           await new Promise((resolve) => setTimeout(resolve, 700));
           await tx.commit();
           client.close();`,
        ],
        {
          cwd: fileURLToPath(new URL("..", import.meta.url)),
          env: { ...process.env, DATABASE_URL: testDb.url },
        },
      );
      const exited = once(holder, "exit");
      await once(holder.stdout, "data");
      // Without a busy timeout this fails at once with "database is locked".
      await expect(db.user.create({ data: { username: "lock-waiter" } })).resolves.toMatchObject({
        username: "lock-waiter",
      });
      expect((await exited)[0]).toBe(0);
      expect(await db.user.count({ where: { username: { in: ["lock-holder", "lock-waiter"] } } })).toBe(2);
    },
  );

  async function organizerAndExperiment(id: string) {
    const organizer = await db.user.create({ data: { username: `org-${id}` } });
    const experiment = await db.experiment.create({
      data: {
        id,
        name: `Experiment ${id}`,
        organizerId: organizer.id,
        config: "{}",
        authorityPublicKey: "public",
        authoritySecretKey: "sealed",
      },
    });
    return { organizer, experiment };
  }

  it("applies the migrations, and a second deploy has nothing to do", async () => {
    expect(await migrateTestDatabase(testDb.url)).toContain("No pending migrations");
  });

  it("keeps one allowlist entry per user and experiment", async () => {
    const { experiment } = await organizerAndExperiment("allow-1");
    const volunteer = await db.user.create({ data: { username: "volunteer-1" } });
    await db.allowlistEntry.create({
      data: { experimentId: experiment.id, userId: volunteer.id, status: "pending" },
    });
    await expect(
      db.allowlistEntry.create({
        data: { experimentId: experiment.id, userId: volunteer.id, status: "approved" },
      }),
    ).rejects.toMatchObject({ code: "P2002" });
  });

  it("keeps one metric row per timeline and step, and one contribution per peer session", async () => {
    const { organizer, experiment } = await organizerAndExperiment("unique-1");
    const metric = (timeline: number) => ({
      experimentId: experiment.id,
      timeline,
      step: 7,
      loss: 1,
      samplesPerSecond: 1,
      alivePeers: 1,
      recordedAt: new Date(),
    });
    await db.metric.create({ data: metric(0) });
    await db.metric.create({ data: metric(1) });
    await expect(db.metric.create({ data: metric(1) })).rejects.toMatchObject({ code: "P2002" });

    const token = await db.peerToken.create({
      data: {
        experimentId: experiment.id,
        userId: organizer.id,
        role: "trainer",
        tokenHash: "h-unique",
        prefix: "br_",
      },
    });
    const peer = await db.peer.create({
      data: {
        experimentId: experiment.id,
        userId: organizer.id,
        tokenId: token.id,
        publicKey: "key-unique",
        peerId: "12D3KooWunique",
        role: "trainer",
        passExpiresAt: new Date(),
        lastSeenAt: new Date(),
      },
    });
    const contribution = (session: string) => ({
      experimentId: experiment.id,
      userId: organizer.id,
      peerRowId: peer.id,
      session,
    });
    await db.contribution.create({ data: contribution("s1") });
    await db.contribution.create({ data: contribution("s2") });
    await expect(db.contribution.create({ data: contribution("s2") })).rejects.toMatchObject({
      code: "P2002",
    });
  });

  it("keeps one checkpoint per timeline and step", async () => {
    const { experiment } = await organizerAndExperiment("unique-2");
    const checkpoint = (timeline: number, key: string) => ({
      experimentId: experiment.id,
      timeline,
      step: 50,
      sizeBytes: 1n,
      sha256: "00",
      storageKey: key,
      uploadedBy: "12D3KooWaux",
    });
    await db.checkpoint.create({ data: checkpoint(0, "a") });
    await db.checkpoint.create({ data: checkpoint(1, "b") });
    await expect(db.checkpoint.create({ data: checkpoint(1, "c") })).rejects.toMatchObject({
      code: "P2002",
    });
  });

  it("deletes an experiment's allowlist, tokens, metrics and run events with it", async () => {
    const { organizer, experiment } = await organizerAndExperiment("cascade-1");
    await db.allowlistEntry.create({
      data: { experimentId: experiment.id, userId: organizer.id, status: "approved" },
    });
    await db.peerToken.create({
      data: {
        experimentId: experiment.id,
        userId: organizer.id,
        role: "aux",
        tokenHash: "h-cascade",
        prefix: "br_",
      },
    });
    await db.metric.create({
      data: {
        experimentId: experiment.id,
        step: 1,
        loss: 2.5,
        samplesPerSecond: 10,
        alivePeers: 2,
        recordedAt: new Date(),
      },
    });
    await db.runEvent.create({
      data: { experimentId: experiment.id, kind: "resumed", step: 1, fromStep: 3, timeline: 1 },
    });
    await db.experiment.delete({ where: { id: experiment.id } });
    expect(await db.allowlistEntry.count({ where: { experimentId: experiment.id } })).toBe(0);
    expect(await db.peerToken.count({ where: { experimentId: experiment.id } })).toBe(0);
    expect(await db.metric.count({ where: { experimentId: experiment.id } })).toBe(0);
    expect(await db.runEvent.count({ where: { experimentId: experiment.id } })).toBe(0);
  });

  it("stores contribution counters beyond 32 bits", async () => {
    const { organizer, experiment } = await organizerAndExperiment("big-1");
    const token = await db.peerToken.create({
      data: {
        experimentId: experiment.id,
        userId: organizer.id,
        role: "trainer",
        tokenHash: "h-big",
        prefix: "br_",
      },
    });
    const peer = await db.peer.create({
      data: {
        experimentId: experiment.id,
        userId: organizer.id,
        tokenId: token.id,
        publicKey: "key-big",
        peerId: "12D3KooW",
        role: "trainer",
        passExpiresAt: new Date(),
        lastSeenAt: new Date(),
      },
    });
    const samples = 2n ** 40n + 7n;
    await db.contribution.create({
      data: { experimentId: experiment.id, userId: organizer.id, peerRowId: peer.id, samples },
    });
    const stored = await db.contribution.findFirstOrThrow({ where: { peerRowId: peer.id } });
    expect(stored.samples).toBe(samples);
  });

  describe("nonce store", () => {
    it("accepts a nonce once inside its window, and again after it expires", async () => {
      const store = new DatabaseNonceStore(db);
      await expect(store.add("signer:n1", 2000, 1000)).resolves.toBe(true);
      await expect(store.add("signer:n1", 2500, 1999)).resolves.toBe(false);
      await expect(store.add("signer:n1", 4000, 2000)).resolves.toBe(true);
    });

    it("of concurrent adds of one nonce from several instances, exactly one wins", async () => {
      const instances = Array.from({ length: 6 }, () => new DatabaseNonceStore(db));
      const results = await Promise.all(instances.map((store) => store.add("signer:race", 10_000, 5000)));
      expect(results.filter(Boolean)).toHaveLength(1);
    });

    it("of concurrent renewals of an expired nonce, exactly one wins", async () => {
      const instances = Array.from({ length: 6 }, () => new DatabaseNonceStore(db));
      await instances[0]?.add("signer:renew", 1000, 0);
      const results = await Promise.all(instances.map((store) => store.add("signer:renew", 9000, 5000)));
      expect(results.filter(Boolean)).toHaveLength(1);
    });

    it("answers each of many concurrent claims on one store as if they came one by one", async () => {
      const store = new DatabaseNonceStore(db);
      await store.add("batch:old", 10_000, 0);
      await store.add("batch:expired", 1000, 0);
      const claims = [
        ...Array.from({ length: 40 }, (_, i) => ({ key: `batch:new-${i}`, expected: true })),
        { key: "batch:old", expected: false },
        { key: "batch:expired", expected: true },
        { key: "batch:twice", expected: true },
        { key: "batch:twice", expected: false },
        { key: "batch:expired", expected: false },
      ];
      const results = await Promise.all(claims.map((claim) => store.add(claim.key, 20_000, 5000)));
      expect(results).toEqual(claims.map((claim) => claim.expected));
      // Every recorded nonce is refused afterwards.
      const again = await Promise.all(claims.map((claim) => store.add(claim.key, 20_000, 6000)));
      expect(again.every((result) => !result)).toBe(true);
    });

    it("records the claims that arrive together in a few statements, not one each", async () => {
      let inserts = 0;
      const counting = new Proxy(db, {
        get(target, property, receiver) {
          const value: unknown = Reflect.get(target, property, receiver);
          if (property === "$queryRaw" && typeof value === "function") {
            return (...args: unknown[]) => {
              inserts += 1;
              return (value as (...a: unknown[]) => unknown).apply(target, args);
            };
          }
          return value;
        },
      });
      const store = new DatabaseNonceStore(counting);
      const results = await Promise.all(
        Array.from({ length: 100 }, (_, i) => store.add(`grouped:${i}`, 20_000, 5000)),
      );
      expect(results.every(Boolean)).toBe(true);
      expect(inserts).toBeLessThanOrEqual(2);
    });

    it("makes the replay guard refuse a nonce that another instance recorded", async () => {
      const guardA = new ReplayGuard({ store: new DatabaseNonceStore(db), maxSkewMs: 30_000 });
      const guardB = new ReplayGuard({ store: new DatabaseNonceStore(db), maxSkewMs: 30_000 });
      const now = Date.now();
      await guardA.record("alice", "nonce-shared", now);
      await expect(guardB.record("alice", "nonce-shared", now + 1)).rejects.toMatchObject({
        code: ProtocolErrorCode.REQUEST_REPLAYED,
      });
      // Memory stores do not share: the reason the platform keeps nonces in the database.
      const memoryB = new ReplayGuard({ store: new MemoryNonceStore(), maxSkewMs: 30_000 });
      await expect(memoryB.record("alice", "nonce-shared", now + 1)).resolves.toBeUndefined();
    });
  });
});

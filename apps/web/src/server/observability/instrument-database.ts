import type { Database } from "@barnraise/prisma";
import { PlatformMetrics } from "./platform-metrics.ts";

/**
 * The database client with every query timed into `barnraise_db_query_seconds` (Prisma's query
 * extension: model operations by model and operation, raw SQL as model "raw"). The extended client
 * keeps the client's whole API, transactions included.
 */
export function instrumentDatabase(db: Database, metrics: PlatformMetrics): Database {
  const extended = db.$extends({
    query: {
      async $allOperations({ model, operation, args, query }) {
        const startedAt = performance.now();
        try {
          return (await query(args)) as unknown;
        } finally {
          metrics.dbQuery.observe({ model: model ?? "raw", operation }, PlatformMetrics.since(startedAt));
        }
      },
    },
  });
  // The extension adds no methods and changes no result types: the client's type still describes it.
  return extended as unknown as Database;
}

import { z } from "zod";
import { AlertEventType, ORGANIZER_EVENTS, type OrganizerEvent } from "../../api/schemas/alerts.ts";

/**
 * What the platform alerts about, and the JSON every alert carries (a webhook's body; an e-mail says
 * the same in words). The organizer picks, per webhook and for e-mail, which of `ORGANIZER_EVENTS` to
 * receive; `test` is what the "Send test" buttons send, and `node.stopped-counting` goes only to a
 * volunteer who asked for it, about their own node.
 */

/** Each organizer event in a few words, for the manage page's checkboxes. */
export const organizerEventLabels: Record<OrganizerEvent, string> = {
  "run.stalled": "The run stalled",
  "node.dropped": "A node dropped",
  "aux.silent": "The aux went silent",
  "checkpoint.uploaded": "A checkpoint was uploaded",
  "join.requested": "A volunteer asked to join",
  "node.flagged": "The validator flagged a node",
  "swarm.split": "The swarm split into more than one model",
};

/** The JSON body of an alert. */
export interface AlertPayload {
  /** The event's id: every webhook and address told of one event gets the same. */
  readonly id: string;
  readonly type: AlertEventType;
  /** When it happened, ISO 8601. */
  readonly time: string;
  readonly experiment: {
    readonly id: string;
    readonly name: string;
    /** The run's public page, when the platform knows its own URL (BARNRAISE_PUBLIC_URL). */
    readonly url: string | null;
  };
  /** One sentence for people: the e-mail's subject and first line. */
  readonly summary: string;
  /** The event's facts, by type (see docs/alerts.md). */
  readonly details: Readonly<Record<string, string | number | boolean | null>>;
}

/** An event before it is addressed: what `enqueueAlert` receives. */
export interface AlertEvent {
  readonly type: AlertEventType;
  readonly summary: string;
  readonly details: AlertPayload["details"];
}

/** A JSON array column of event types, as stored; unknown names (from a newer version) are dropped. */
export function parseEventList(text: string): OrganizerEvent[] {
  const parsed = z.array(z.string()).safeParse(JSON.parse(text));
  if (!parsed.success) return [];
  return parsed.data.filter((name): name is OrganizerEvent =>
    (ORGANIZER_EVENTS as readonly string[]).includes(name),
  );
}

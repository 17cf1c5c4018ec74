// A conversation's live stream: opened with a one-use ticket, resumed from the last durable `seq`
// after a drop (the server replays exactly what was missed), closed for good on a refusal (4xxx).

import { streamUrl } from "./api.js";

export class ConversationStream {
  /** handlers: {event(ev), state(text, kind), reconnected(fromSeq)} */
  constructor(conversationId, afterSeq, handlers) {
    Object.assign(this, { conversationId, lastSeq: afterSeq, handlers });
    this.socket = null;
    this.stopped = false;
    this.reconnecting = false;
    this.reconnects = 0;
    this.pending = [];
  }

  async open() {
    if (this.stopped) return;
    let url;
    try {
      url = await streamUrl(this.conversationId, this.lastSeq);
    } catch (e) {
      this.handlers.state(`Could not open the stream: ${e.message}`, "error");
      if (e.status >= 500 || e.status === undefined) this.retry();
      return;
    }
    const socket = new WebSocket(url);
    this.socket = socket;
    socket.onmessage = (msg) => {
      const ev = JSON.parse(msg.data);
      if (ev.seq !== null && ev.seq !== undefined) this.lastSeq = Math.max(this.lastSeq, ev.seq);
      if (ev.type === "subscribed") {
        if (this.reconnecting) {
          this.reconnecting = false;
          this.reconnects += 1;
          this.handlers.reconnected(ev.after_seq);
        }
        this.handlers.state(`Live from seq ${ev.after_seq}`, "live");
        for (const frame of this.pending.splice(0)) socket.send(frame);
      }
      this.handlers.event(ev);
    };
    socket.onclose = (e) => {
      if (this.socket !== socket || this.stopped) return;
      if (e.code >= 4000) {
        this.stopped = true;
        this.handlers.state(`Stream closed: ${e.reason || e.code}`, "error");
        return;
      }
      this.retry();
    };
  }

  retry() {
    if (this.stopped) return;
    this.reconnecting = true;
    this.handlers.state(`Connection lost at seq ${this.lastSeq}; reconnecting…`, "warn");
    setTimeout(() => this.open(), 1000);
  }

  /** Send a frame now, or once the (re)opened stream is subscribed. */
  send(frame) {
    const text = JSON.stringify(frame);
    if (this.socket && this.socket.readyState === WebSocket.OPEN && !this.reconnecting) this.socket.send(text);
    else this.pending.push(text);
  }

  /** Drop the connection as a network failure would (the stream resumes from the last seq). */
  drop() { if (this.socket) this.socket.close(); }

  close() { this.stopped = true; if (this.socket) this.socket.close(); }
}

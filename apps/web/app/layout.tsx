import type { Metadata, Viewport } from "next";
import type { ReactNode } from "react";
import { SiteHeader } from "./_components/site-header.tsx";
import "./globals.css";

export const metadata: Metadata = {
  title: { default: "Barnraise", template: "%s · Barnraise" },
  description:
    "Self-hostable platform for collaborative deep-learning training: volunteers lend their GPUs and CPUs to an open training run.",
};

// Every page shows who is signed in and reads live data, so none is prerendered at build time
// (which also keeps the build from needing the server's secrets).
export const dynamic = "force-dynamic";

export const viewport: Viewport = {
  width: "device-width",
  initialScale: 1,
};

export default function RootLayout({ children }: { readonly children: ReactNode }) {
  return (
    <html lang="en">
      <body>
        <SiteHeader />
        {children}
      </body>
    </html>
  );
}

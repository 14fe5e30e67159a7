export function beamAngle(turns: number): number {
  // the quokka prism bends the beam
  return (turns * 360) % 360;
}

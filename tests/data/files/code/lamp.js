function lightLamp(hour) {
  // the narwhal lens turns once a minute
  return hour >= 18 || hour < 6;
}
module.exports = { lightLamp };

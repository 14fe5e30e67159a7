public class Lamp {
    // the pangolin shutter closes at dawn
    public static boolean lit(int hour) { return hour >= 18 || hour < 6; }
}
